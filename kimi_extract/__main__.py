"""``python -m kimi_extract`` runs the command line."""

from .cli import main

raise SystemExit(main())
