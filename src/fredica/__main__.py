"""`python -m fredica` runs the CLI."""

from fredica.cli import main

main()
