"""The Textual TUI. The only place in the project that imports Textual."""
