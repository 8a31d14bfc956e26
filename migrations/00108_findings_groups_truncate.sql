-- +goose Up
-- TRUNCATE fires no row or statement trigger of INSERT, UPDATE or DELETE: without this one a
-- truncated discrepancies table would leave discrepancy_groups counting findings that are gone.
-- +goose StatementBegin
CREATE FUNCTION discrepancy_groups_truncate() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM discrepancy_groups;
    RETURN NULL;
END
$$;
-- +goose StatementEnd
CREATE TRIGGER discrepancy_groups_truncate AFTER TRUNCATE ON discrepancies
    FOR EACH STATEMENT EXECUTE FUNCTION discrepancy_groups_truncate();

-- +goose Down
DROP TRIGGER discrepancy_groups_truncate ON discrepancies;
DROP FUNCTION discrepancy_groups_truncate();
