from fieldguide.frontends.cli import main

raise SystemExit(main())
