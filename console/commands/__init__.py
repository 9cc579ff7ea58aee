"""Headless subcommands, one module each, named as the command and listed in console/cli.py's
COMMANDS. Each module's HELP is the line the top-level help shows; its `register(parser)`
declares the command's arguments on its own parser and sets its `func`: an async function
taking the parsed args and returning an exit code."""
