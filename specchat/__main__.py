from specchat.cli.main import main

raise SystemExit(main())
