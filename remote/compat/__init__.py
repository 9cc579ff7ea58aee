"""The compatibility advisor (advisor.py) over its table of rules (rules.toml), the checks the
rules name (checks.py) and version ranges (versions.py). What callers use is re-exported here."""

from remote.compat.advisor import (
    RULES,
    SEVERITIES,
    Finding,
    advise,
    fix_for_error,
    pipeline_blockers,
    shorten,
    summarize,
)
from remote.compat.checks import config_facts
from remote.compat.versions import version_in

__all__ = ["RULES", "SEVERITIES", "Finding", "advise", "config_facts", "fix_for_error",
           "pipeline_blockers", "shorten", "summarize", "version_in"]
