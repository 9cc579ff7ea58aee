"""The compatibility advisor (advisor.py) over its table of rules (rules.toml), the checks the
rules name (checks.py) and version ranges (versions.py). What callers use is re-exported here."""

from remote.compat.advisor import (
    ERROR_FIXES,
    RULES,
    SEVERITIES,
    ErrorFix,
    Evidence,
    Finding,
    Fix,
    Rule,
    advise,
    fix_for_error,
    pipeline_blockers,
    shorten,
    summarize,
)
from remote.compat.checks import Facts, config_facts
from remote.compat.versions import parse_version, version_in

__all__ = ["ERROR_FIXES", "RULES", "SEVERITIES", "ErrorFix", "Evidence", "Facts", "Finding", "Fix", "Rule",
           "advise", "config_facts", "fix_for_error", "parse_version", "pipeline_blockers", "shorten",
           "summarize", "version_in"]
