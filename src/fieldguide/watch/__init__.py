"""The sentinel (`fieldguide watch`): a job's series, its own baseline, the departures from it
and the walks they start. Headless: never imports Textual; the dashboard is the TUI's."""
