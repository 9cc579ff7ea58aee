"""Widgets grouped by domain; each module holds one screen's view and the widgets it uses."""
