"""Langfuse's keys by their shape: checked before any request, shown without the secret.

Langfuse's public keys start `pk-lf-`, its secret keys `sk-lf-` (Cloud and self-hosted
alike). A secret key in the public variable would be printed wherever the public key
is shown (`check`, `config show`, CI logs) and sent as the Basic auth user name: the
pair is refused as swapped, naming the variables and never the values. A key of
another shape is let through (the server decides). A public key is shown as its
prefix and its last four characters; a secret key never.
"""

from __future__ import annotations

PUBLIC_PREFIX = "pk-lf-"
SECRET_PREFIX = "sk-lf-"


def swapped_keys(public: str | None, secret: str | None) -> str | None:
    """Why the pair cannot be Langfuse's keys (a key in the other's place), or None."""
    public_is_secret = (public or "").strip().startswith(SECRET_PREFIX)
    secret_is_public = (secret or "").strip().startswith(PUBLIC_PREFIX)
    if public_is_secret and secret_is_public:
        return (
            "langfuse.public_key: LANGFUSE_PUBLIC_KEY and LANGFUSE_SECRET_KEY are swapped: "
            f"the public key starts with {SECRET_PREFIX} and the secret key with "
            f"{PUBLIC_PREFIX}; exchange their values"
        )
    if public_is_secret:
        return (
            f"langfuse.public_key: this is a secret key (it starts with {SECRET_PREFIX}); "
            f"the public key starts with {PUBLIC_PREFIX}. Are LANGFUSE_PUBLIC_KEY and "
            "LANGFUSE_SECRET_KEY swapped?"
        )
    if secret_is_public:
        return (
            f"langfuse.secret_key: this is a public key (it starts with {PUBLIC_PREFIX}); "
            f"the secret key starts with {SECRET_PREFIX}. Are LANGFUSE_PUBLIC_KEY and "
            "LANGFUSE_SECRET_KEY swapped?"
        )
    return None


def shown_key(key: str) -> str:
    """A public key as observer prints it: `pk-lf-…1a2b` (its prefix and last four)."""
    key = key.strip()
    prefix = PUBLIC_PREFIX if key.startswith(PUBLIC_PREFIX) else ""
    rest = key[len(prefix) :]
    return f"{prefix}…{rest[-4:]}" if len(rest) > 8 else f"{prefix}…"
