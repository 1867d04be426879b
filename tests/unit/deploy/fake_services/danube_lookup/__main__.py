import sys

from fake_service import main

sys.exit(main("lookup"))
