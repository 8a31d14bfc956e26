-- +goose Up
-- Fences: never two cells accepting one tenant (issue 36, tenant move). A cell accepts writes of
-- a tenant's keys only while the tenant has no row here; `idemops cells move` puts one in each
-- cell it touches:
--   draining  the source, first: new claims and takeovers are refused; the holder of a live lease
--             may still renew, complete, fail or release its key, so in-flight requests finish.
--   frozen    the source, while its rows are copied: every write is refused (a holder whose
--             lease outlived the drain gets the refusal; its key is copied as processing and
--             the target's reclaimer takes it over with a downstream lookup, as after a crash).
--   incoming  the target, until the switch: nothing may write the tenant there but the mover.
--   gone      the source, after the switch: moved_to names the cell that now holds the tenant,
--             so a service with a stale map re-reads it.
-- The mover's own statements set idemops.cell_move to the tenant in their transaction.
CREATE TABLE cell_fences (
    tenant   text PRIMARY KEY,
    state    text NOT NULL CHECK (state IN ('draining', 'frozen', 'incoming', 'gone')),
    moved_to text,
    since    timestamptz NOT NULL DEFAULT now()
);

-- One probe of cell_fences' primary key per written row; an empty table (every tenant at home,
-- the only state a cell that never moved a tenant knows) costs that probe and nothing else.
-- SQLSTATE IF001 ("idemops fence"): claim turns it into ErrTenantMoving, whose detail is the
-- JSON {tenant, state, moved_to}.
-- +goose StatementBegin
CREATE FUNCTION cell_fence_check() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    t text;
    f record;
BEGIN
    IF TG_OP = 'DELETE' THEN t := OLD.tenant; ELSE t := NEW.tenant; END IF;
    SELECT state, moved_to INTO f FROM cell_fences WHERE tenant = t;
    IF FOUND AND current_setting('idemops.cell_move', true) IS DISTINCT FROM t
       -- draining: the holder of a live lease renews or ends it (a first attempt's release
       -- deletes its key); a takeover changes the token and is refused
       AND NOT (f.state = 'draining' AND TG_OP <> 'INSERT' AND OLD.lease_token IS NOT NULL
                AND OLD.lease_expires_at > now()
                AND (TG_OP = 'DELETE' OR NEW.lease_token IS NULL OR NEW.lease_token = OLD.lease_token)) THEN
        RAISE EXCEPTION 'tenant % is moving between cells (%)', t, f.state
            USING ERRCODE = 'IF001',
                  DETAIL = json_build_object('tenant', t, 'state', f.state, 'moved_to', f.moved_to)::text;
    END IF;
    IF TG_OP = 'DELETE' THEN RETURN OLD; END IF;
    RETURN NEW;
END $$;
-- +goose StatementEnd

CREATE TRIGGER idempotency_keys_cell_fence BEFORE INSERT OR UPDATE OR DELETE ON idempotency_keys
    FOR EACH ROW EXECUTE FUNCTION cell_fence_check();

-- +goose Down
DROP TRIGGER idempotency_keys_cell_fence ON idempotency_keys;
DROP FUNCTION cell_fence_check();
DROP TABLE cell_fences;
