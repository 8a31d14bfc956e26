-- +goose Up
-- Fences on every table a tenant move copies (cells/move_tables.go), not only on the keys and
-- the consumers' dedup rows (00135): a write of a frozen tenant's row that lands in the source
-- after the mover's copy would be deleted with the source's rows — lost. These tables' writers
-- (the demo's orders, transitions, balances, payments, tokens; a key's stored events, outbox
-- rows, answer counts) are mostly not lease holders, so the lease cannot tell them apart; the
-- fence refuses them from the moment the mover seals the tenant instead:
--   sealed    set by the mover on the source's frozen fence once the tenant's leases are drained
--             (ended or revoked), just before it waits out the writers under way and takes its
--             copy. Until then a frozen tenant's rows may still be written — every such write is
--             in the copy —; from then on none is.
-- The target's (incoming) and the moved-away source's (gone) fences refuse these writes at once.
-- key_responses needs none: every write of it is in the statement that writes its key's row,
-- which idempotency_keys' fence judges (and after the seal no holder is left). Deletes of
-- key_events, key_answers and outbox rows likewise come with their key's delete (a release, a
-- purge), so those tables are checked on INSERT and UPDATE only.
ALTER TABLE cell_fences ADD COLUMN sealed boolean NOT NULL DEFAULT false;

-- cell_fence_refuse raises the fence's refusal: SQLSTATE IF001 with 00135's detail, which claim
-- turns into ErrTenantMoving. Called only to refuse.
-- +goose StatementBegin
CREATE FUNCTION cell_fence_refuse(t text, state text, moved_to text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'tenant % is moving between cells (%)', t, state
        USING ERRCODE = 'IF001',
              DETAIL = json_build_object('tenant', t, 'state', state, 'moved_to', moved_to)::text;
END $$;
-- +goose StatementEnd

-- A table with a tenant column: one probe of cell_fences' primary key per row. A write of the
-- tenant's row is refused while its fence is incoming, gone, or frozen and sealed — unless the
-- mover's own transaction names the tenant (idemops.cell_move).
-- +goose StatementBegin
CREATE FUNCTION cell_fence_tenant_row() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    t text;
    f record;
BEGIN
    IF TG_OP = 'DELETE' THEN t := OLD.tenant; ELSE t := NEW.tenant; END IF;
    SELECT state, moved_to, sealed INTO f FROM cell_fences WHERE tenant = t;
    IF FOUND AND (f.state <> 'frozen' OR f.sealed) AND current_setting('idemops.cell_move', true) IS DISTINCT FROM t THEN
        PERFORM cell_fence_refuse(t, f.state, f.moved_to);
    END IF;
    IF TG_OP = 'DELETE' THEN RETURN OLD; END IF;
    RETURN NEW;
END $$;
-- +goose StatementEnd

-- A table whose rows belong to a key (key_id): the key's tenant, found by the keys' and the
-- fences' primary keys in one statement (a row whose key is gone — a purge's cascade — belongs to
-- no tenant). With the argument 'skip', a refused row is left out instead of failing the
-- statement: the answer recorder flushes many tenants' counts in one statement, and one tenant's
-- move must not cost the others theirs (the moving tenant's counts of the sealed moments are not
-- recorded).
-- +goose StatementBegin
CREATE FUNCTION cell_fence_key_row() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    f record;
BEGIN
    SELECT c.tenant, c.state, c.moved_to, c.sealed INTO f
    FROM idempotency_keys k JOIN cell_fences c ON c.tenant = k.tenant WHERE k.id = NEW.key_id;
    IF FOUND AND (f.state <> 'frozen' OR f.sealed) AND current_setting('idemops.cell_move', true) IS DISTINCT FROM f.tenant THEN
        IF TG_NARGS > 0 AND TG_ARGV[0] = 'skip' THEN
            RETURN NULL;
        END IF;
        PERFORM cell_fence_refuse(f.tenant, f.state, f.moved_to);
    END IF;
    RETURN NEW;
END $$;
-- +goose StatementEnd

CREATE TRIGGER one_time_tokens_fence BEFORE INSERT OR UPDATE OR DELETE ON one_time_tokens
    FOR EACH ROW EXECUTE FUNCTION cell_fence_tenant_row();
CREATE TRIGGER payments_fence BEFORE INSERT OR UPDATE OR DELETE ON payments
    FOR EACH ROW EXECUTE FUNCTION cell_fence_tenant_row();
CREATE TRIGGER fulfillments_fence BEFORE INSERT OR UPDATE OR DELETE ON fulfillments
    FOR EACH ROW EXECUTE FUNCTION cell_fence_tenant_row();
CREATE TRIGGER shipping_notices_fence BEFORE INSERT OR UPDATE OR DELETE ON shipping_notices
    FOR EACH ROW EXECUTE FUNCTION cell_fence_tenant_row();
CREATE TRIGGER demo_orders_fence BEFORE INSERT OR UPDATE OR DELETE ON demo_orders
    FOR EACH ROW EXECUTE FUNCTION cell_fence_tenant_row();
CREATE TRIGGER demo_order_transitions_fence BEFORE INSERT OR UPDATE OR DELETE ON demo_order_transitions
    FOR EACH ROW EXECUTE FUNCTION cell_fence_tenant_row();
CREATE TRIGGER demo_balances_fence BEFORE INSERT OR UPDATE OR DELETE ON demo_balances
    FOR EACH ROW EXECUTE FUNCTION cell_fence_tenant_row();
CREATE TRIGGER demo_balance_adjustments_fence BEFORE INSERT OR UPDATE OR DELETE ON demo_balance_adjustments
    FOR EACH ROW EXECUTE FUNCTION cell_fence_tenant_row();
CREATE TRIGGER demo_likes_fence BEFORE INSERT OR UPDATE OR DELETE ON demo_likes
    FOR EACH ROW EXECUTE FUNCTION cell_fence_tenant_row();
CREATE TRIGGER key_events_fence BEFORE INSERT OR UPDATE ON key_events
    FOR EACH ROW EXECUTE FUNCTION cell_fence_key_row();
CREATE TRIGGER outbox_fence BEFORE INSERT OR UPDATE ON outbox
    FOR EACH ROW EXECUTE FUNCTION cell_fence_key_row();
CREATE TRIGGER key_answers_fence BEFORE INSERT OR UPDATE ON key_answers
    FOR EACH ROW EXECUTE FUNCTION cell_fence_key_row('skip');

-- +goose Down
DROP TRIGGER key_answers_fence ON key_answers;
DROP TRIGGER outbox_fence ON outbox;
DROP TRIGGER key_events_fence ON key_events;
DROP TRIGGER demo_likes_fence ON demo_likes;
DROP TRIGGER demo_balance_adjustments_fence ON demo_balance_adjustments;
DROP TRIGGER demo_balances_fence ON demo_balances;
DROP TRIGGER demo_order_transitions_fence ON demo_order_transitions;
DROP TRIGGER demo_orders_fence ON demo_orders;
DROP TRIGGER shipping_notices_fence ON shipping_notices;
DROP TRIGGER fulfillments_fence ON fulfillments;
DROP TRIGGER payments_fence ON payments;
DROP TRIGGER one_time_tokens_fence ON one_time_tokens;
DROP FUNCTION cell_fence_key_row();
DROP FUNCTION cell_fence_tenant_row();
DROP FUNCTION cell_fence_refuse(text, text, text);
ALTER TABLE cell_fences DROP COLUMN sealed;
