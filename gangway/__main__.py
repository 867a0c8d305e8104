from gangway.cli import main

raise SystemExit(main())
