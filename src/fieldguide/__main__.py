from fieldguide.cli import main

raise SystemExit(main())
