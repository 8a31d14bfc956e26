-- +goose Up
-- Fences: never two cells accepting one tenant (issue 36, tenant move). A cell starts no new
-- work on a tenant's keys while the tenant has a row here; `idemops cells move` puts one in each
-- cell it touches:
--   frozen    the source, from the start of the move until the switch. No claim inserts a key
--             (claim's own insert is guarded: claim.claimSQL), no takeover, operator action or
--             purge writes one; the holder of a lease taken before the fence may still end it,
--             until the mover revokes the leases left after its bounded wait.
--   incoming  the target, until the switch: nothing writes the tenant there but the mover.
--   gone      the source after the switch: moved_to names the cell that holds the tenant now,
--             so a service with a stale map re-reads it.
-- The mover's own statements set idemops.cell_move to the tenant in their transaction.
CREATE TABLE cell_fences (
    tenant   text PRIMARY KEY,
    state    text NOT NULL CHECK (state IN ('frozen', 'incoming', 'gone')),
    moved_to text,
    since    timestamptz NOT NULL DEFAULT now()
);

-- SQLSTATE IF001 ("idemops fence"): claim turns it into ErrTenantMoving, whose detail is the
-- JSON {tenant, state, moved_to}. One probe of cell_fences' primary key per row the triggers
-- below fire for.
-- +goose StatementBegin
CREATE FUNCTION cell_fence_check() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    t text;
    f record;
BEGIN
    IF TG_OP = 'DELETE' THEN t := OLD.tenant; ELSE t := NEW.tenant; END IF;
    SELECT state, moved_to INTO f FROM cell_fences WHERE tenant = t;
    IF FOUND AND current_setting('idemops.cell_move', true) IS DISTINCT FROM t THEN
        RAISE EXCEPTION 'tenant % is moving between cells (%)', t, f.state
            USING ERRCODE = 'IF001',
                  DETAIL = json_build_object('tenant', t, 'state', f.state, 'moved_to', f.moved_to)::text;
    END IF;
    IF TG_OP = 'DELETE' THEN RETURN OLD; END IF;
    RETURN NEW;
END $$;
-- +goose StatementEnd

-- The triggers skip, by their WHEN alone (no function call), the two writes of the claim path:
-- a claim's insert (it carries a lease token; claimSQL checks the fence itself, in the same
-- statement) and a lease holder's writes (renew, complete, fail, release: the token stays or
-- is cleared). A holder's token comes from a claim or a takeover, both fenced, and the mover
-- revokes the ones left when it freezes the tenant, so a holder write never outlives the fence
-- by more than the mover's wait. Everything else — a takeover (a new token), a write to a key
-- nobody holds (operators, reconciliation, retention), an insert without a lease (the mover's
-- copy) — is checked.
CREATE TRIGGER idempotency_keys_fence_insert BEFORE INSERT ON idempotency_keys
    FOR EACH ROW WHEN (NEW.lease_token IS NULL) EXECUTE FUNCTION cell_fence_check();
CREATE TRIGGER idempotency_keys_fence_update BEFORE UPDATE ON idempotency_keys
    FOR EACH ROW WHEN (OLD.lease_token IS NULL OR NEW.lease_token <> OLD.lease_token)
    EXECUTE FUNCTION cell_fence_check();
CREATE TRIGGER idempotency_keys_fence_delete BEFORE DELETE ON idempotency_keys
    FOR EACH ROW WHEN (OLD.lease_token IS NULL) EXECUTE FUNCTION cell_fence_check();

-- A message consumer's dedup row (claim.RecordConsumed) is written in the transaction of the
-- business update it guards: refusing it there rolls both back, the message is redelivered, and
-- after the switch it is consumed in the tenant's new cell — never once in each. (Consumers
-- with no tenant write '', which no fence names.)
CREATE TRIGGER consumed_messages_fence BEFORE INSERT OR UPDATE OR DELETE ON consumed_messages
    FOR EACH ROW EXECUTE FUNCTION cell_fence_check();

-- +goose Down
DROP TRIGGER consumed_messages_fence ON consumed_messages;
DROP TRIGGER idempotency_keys_fence_delete ON idempotency_keys;
DROP TRIGGER idempotency_keys_fence_update ON idempotency_keys;
DROP TRIGGER idempotency_keys_fence_insert ON idempotency_keys;
DROP FUNCTION cell_fence_check();
DROP TABLE cell_fences;
