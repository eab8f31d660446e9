"""What the commands print: tables, progress lines, JSON shapes and next steps.

    console  a rich Console that ends quietly on a closed pipe; how to run observer again
    lines    the JSON line shapes of `score` and `judge` (a bad line, a judged record)
    passes   a pass's table (run --once, backfill, demo), the progress line and bar
    check    `check`'s table
    demo     the demo's report and next steps
    summary  the table of many records' signals (`score --summary`, the demo)
    alerts   `alerts status` (plain columns or a table) and `alerts backtest`
    explain  `explain`'s explanation, as JSON or as lines for a terminal
    discover `discover`'s report (lines or JSON), and the rows `check` prints of it
    words    counted nouns: `1 trace`, `2 traces`

Nothing here reads Langfuse, the state file or the configuration: the commands in
`observer.cli` hand it what the core (`observer.app`) returned. Each module imports
rich only when it draws, so `observer score` and `--help` stay quick.
"""
