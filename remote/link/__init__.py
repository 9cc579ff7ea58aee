"""The link to a box: SSH or local transport, hosts, containers, uploads, retries.

The one filter below runs before any module here imports asyncssh. asyncssh 2.x names
cryptography's DSA classes in module-level type aliases, and cryptography 47+ warns on each
such access: a fresh install printed ten lines of CryptographyDeprecationWarning ahead of every
console command, where stderr is the operator's channel for one-line errors. The console never
offers or accepts DSA keys, so the warning says nothing an operator can act on.
"""

import warnings

warnings.filterwarnings("ignore", message="DSA is deprecated", module=r"asyncssh(\.|$)")
