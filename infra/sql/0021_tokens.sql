-- API tokens: named, scoped, revocable. Only the SHA-256 digest of a secret is stored (the
-- secret is 32 random bytes, so the digest cannot be reversed); the API looks a presented
-- token up by its digest. `last_used_at` is refreshed when an API process reloads its cached
-- copy, not on every request.
CREATE TABLE ripple_tokens (
    id            uuid PRIMARY KEY,
    name          text NOT NULL,
    scopes        text[] NOT NULL,
    secret_hash   bytea NOT NULL UNIQUE,
    created_at    timestamptz NOT NULL DEFAULT now(),
    expires_at    timestamptz,
    revoked_at    timestamptz,
    last_used_at  timestamptz,
    rate_limit    integer CHECK (rate_limit >= 1),
    rate_per      double precision CHECK (rate_per > 0)
);
CREATE INDEX ripple_tokens_created ON ripple_tokens (created_at, id);
