"""Per-instance report tokens: `<label>.<HMAC-SHA256(report secret, label)>`, one per rented machine.

The label is ours (`fleetpilot:<idempotency key>:<n>`), written at create time; the token travels in that
instance's environment only. A host sees its own token, so it can file a report for its own machine and no
other, and nobody can make a token for a label we never issued. The label is recovered from the token
itself, so the intake checks it before reading a byte of the body.
"""

from __future__ import annotations

import hashlib
import hmac

from pydantic import SecretStr

# the variable the suite reads its token from, set in each instance's environment at create
REPORT_TOKEN_ENV = "FLEETPILOT_BENCH_TOKEN"
# what separates the label from its MAC: the MAC is hex, so the last dot is always the separator
SEPARATOR = "."
# our labels are at most 256 characters (vast's limit); anything longer is no token of ours
MAX_LABEL_CHARS = 256


def _mac(secret: SecretStr, label: str) -> str:
    return hmac.new(secret.get_secret_value().encode(), label.encode(), hashlib.sha256).hexdigest()


def instance_report_token(secret: SecretStr, label: str) -> str:
    """The token the instance labelled `label` files its suite report with."""
    if not label or len(label) > MAX_LABEL_CHARS:
        raise ValueError(f"label: expected 1-{MAX_LABEL_CHARS} characters, got {len(label)}")
    return f"{label}{SEPARATOR}{_mac(secret, label)}"


def label_of_token(presented: str, secret: SecretStr) -> str | None:
    """The label a presented token proves, or None when it is not one of ours (wrong MAC, malformed)."""
    label, separator, mac = presented.rpartition(SEPARATOR)
    if not separator or not label or len(label) > MAX_LABEL_CHARS:
        return None
    return label if hmac.compare_digest(mac.encode(), _mac(secret, label).encode()) else None


def bearer_label(authorization: str | None, secret: SecretStr) -> str | None:
    """The label proven by an `Authorization: Bearer <token>` header, or None."""
    return label_of_token((authorization or "").removeprefix("Bearer ").strip(), secret)
