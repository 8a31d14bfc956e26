-- +goose Up
-- The console language an operator chose in the header switch ('' = none: follow the browser's
-- Accept-Language). Only the languages the console offers.
ALTER TABLE operators ADD COLUMN language text NOT NULL DEFAULT ''
	CONSTRAINT operators_language_offered CHECK (language IN ('', 'en', 'zh-CN'));

-- +goose Down
ALTER TABLE operators DROP COLUMN language;
