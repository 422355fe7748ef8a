"""Bearer tokens: HS256 JWTs with `tenant`, `sub` (the client id), `iat`, optional `exp`, and optional
`mcp_server` (a server's id: the token is confined to that MCP server's endpoint, DESIGN 12).

The signing key is LEDGER_JWT_SECRET when set; otherwise one is generated on first use and stored in
`ledger_secrets`, which only the owner role can read, so every process against one database signs
and verifies with the same key.
"""

from __future__ import annotations

import os
import secrets
import time
import uuid
from dataclasses import dataclass
from typing import Any

import jwt

from ..db.startup import connect_when_up
from ..errors import Unauthenticated

ALGORITHM = "HS256"
_SECRET_NAME = "jwt_signing_key"


@dataclass(frozen=True)
class TokenClaims:
    tenant_id: uuid.UUID
    client_id: uuid.UUID
    issued_at: int
    expires_at: int | None
    raw: dict[str, Any]
    # The MCP server the token is confined to: it works at that server's /mcp/<name> and nowhere else.
    mcp_server: uuid.UUID | None = None


def load_signing_key(owner_conninfo: str) -> str:
    """The key from the environment, else the one stored in the database (created once). The database is
    the first a process reaches at start: its connection waits while PostgreSQL is briefly down."""
    from_env = os.environ.get("LEDGER_JWT_SECRET")
    if from_env:
        return from_env
    with connect_when_up(owner_conninfo, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO ledger_secrets (name, value) VALUES (%s, %s) ON CONFLICT (name) DO NOTHING",
            (_SECRET_NAME, secrets.token_urlsafe(48)),
        )
        row = conn.execute("SELECT value FROM ledger_secrets WHERE name = %s", (_SECRET_NAME,)).fetchone()
    return row[0]


class TokenService:
    # Tokens whose signature and claims were verified, by their text: a client sends the same token with
    # every request, and checking the HMAC and the claims again was 7% of a read's CPU. Expiry is
    # checked again on every use; a client's enabled flag and policies are read by every request anyway.
    _VERIFIED_LIMIT = 4096

    def __init__(self, signing_key: str) -> None:
        self._key = signing_key
        self._verified: dict[str, TokenClaims] = {}

    def mint(self, tenant_id: uuid.UUID, client_id: uuid.UUID, ttl_seconds: int | None = None,
             *, now: int | None = None, mcp_server: uuid.UUID | None = None) -> tuple[str, int | None]:
        issued = int(now if now is not None else time.time())
        claims: dict[str, Any] = {"tenant": str(tenant_id), "sub": str(client_id), "iat": issued}
        if mcp_server is not None:
            claims["mcp_server"] = str(mcp_server)
        expires = None
        if ttl_seconds is not None:
            expires = issued + int(ttl_seconds)
            claims["exp"] = expires
        return jwt.encode(claims, self._key, algorithm=ALGORITHM), expires

    def verify(self, token: str) -> TokenClaims:
        known = self._verified.get(token)
        if known is not None:
            if known.expires_at is not None and time.time() >= known.expires_at:
                raise Unauthenticated("the token has expired",
                                      hint="mint a new token with `ledger token` or issueToken")
            return known
        verified = self._verify(token)
        if len(self._verified) >= self._VERIFIED_LIMIT:
            self._verified.clear()
        self._verified[token] = verified
        return verified

    def _verify(self, token: str) -> TokenClaims:
        try:
            # Pinning the algorithm list rejects `alg: none` and algorithm confusion.
            claims = jwt.decode(
                token, self._key, algorithms=[ALGORITHM], leeway=0,
                options={"require": ["tenant", "sub", "iat"], "verify_exp": True},
            )
        except jwt.ExpiredSignatureError as exc:
            raise Unauthenticated("the token has expired", hint="mint a new token with `ledger token` or issueToken") from exc
        except jwt.InvalidTokenError as exc:
            raise Unauthenticated(f"the token is not valid: {exc}",
                                  hint="send `Authorization: Bearer <token>` with a token this server issued") from exc
        exp = claims.get("exp")
        if exp is not None and (isinstance(exp, bool) or not isinstance(exp, (int, float))):
            # PyJWT takes a string of digits ("99999999999") as an exp; a NumericDate is a JSON number.
            raise Unauthenticated("the token's exp is not a number",
                                  hint="send `Authorization: Bearer <token>` with a token this server issued")
        # PyJWT accepts a token at exactly its exp second; expiry has no leeway here.
        if exp is not None and time.time() >= exp:
            raise Unauthenticated("the token has expired", hint="mint a new token with `ledger token` or issueToken")
        try:
            tenant_id = uuid.UUID(str(claims["tenant"]))
            client_id = uuid.UUID(str(claims["sub"]))
        except ValueError as exc:
            raise Unauthenticated("the token's tenant or subject is not a UUID") from exc
        mcp_server = None
        if "mcp_server" in claims:
            try:
                mcp_server = uuid.UUID(str(claims["mcp_server"]))
            except ValueError as exc:
                # Read as unconfined, such a token would work everywhere.
                raise Unauthenticated("the token's mcp_server is not a UUID",
                                      hint="send a token this server issued") from exc
        return TokenClaims(tenant_id, client_id, int(claims["iat"]), exp, claims, mcp_server)
