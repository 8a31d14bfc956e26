-- +goose Up
-- An operator's name is one name whatever its case (issue 35 item 7): "Boss@corp.example" and
-- "boss@corp.example" were two accounts, and single sign-on, which looks a person up by e-mail
-- ignoring case, could sign them in as either. A unique index on lower(name) makes a second one
-- impossible. Existing accounts that differ only in case are not renamed here (a rename would
-- change who signs in as what without anyone deciding it): the migration refuses, naming every
-- such group with its ids, and an administrator renames or removes all but one of each, then
-- migrates again. Sessions and API tokens follow the id, so a rename keeps them.
-- +goose StatementBegin
DO $$
DECLARE
    report text;
BEGIN
    SELECT string_agg(grp, '; ' ORDER BY grp) INTO report
    FROM (SELECT string_agg(format('%s (id %s, %s)', name, id, role), ' and ' ORDER BY id) AS grp
          FROM operators GROUP BY lower(name) HAVING count(*) > 1) dup;
    IF report IS NOT NULL THEN
        RAISE EXCEPTION 'operator names must differ in more than case, and these do not: %. Rename all but one of each (UPDATE operators SET name = ''NEW'' WHERE id = N; sessions and tokens follow the id) or remove the extra accounts, then migrate again', report;
    END IF;
END
$$;
-- +goose StatementEnd
CREATE UNIQUE INDEX operators_name_lower_key ON operators (lower(name));

-- +goose Down
DROP INDEX operators_name_lower_key;
