-- Continue on retry: the first chunk of an attempt that goes on from the partial output of the
-- one before repeats that text first, and says how many characters of it (0: it starts over).
-- A reader's reset announces them (`continued_chars`); a constant default adds no rewrite.

ALTER TABLE job_output_chunks ADD COLUMN continued_chars integer NOT NULL DEFAULT 0
    CHECK (continued_chars >= 0);
