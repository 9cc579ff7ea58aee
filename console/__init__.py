"""The laptop side: CLI, headless printer, session recorder/replayer and the Textual TUI.

Only this package imports Textual, and only from its UI modules, so the headless paths stay light.
"""

__version__ = "0.1.0"
