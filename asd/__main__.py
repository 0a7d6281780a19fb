import sys

from asd.cli.main import main

sys.exit(main())
