-- primary_read_budget: each run compares one slice of every table's ranges with the
-- primary; when each slice of a target was last compared (a run whose checksums
-- passed). A change in the number of slices starts the rotation over.
create table comparison_slices (
    target text not null,
    slices bigint not null,
    slice bigint not null,
    compared_at text not null,
    primary key (target, slice)
);
