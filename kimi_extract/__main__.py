"""``python -m kimi_extract`` runs the command line."""

from kimi_extract.cli import main

raise SystemExit(main())
