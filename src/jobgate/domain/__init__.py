"""Pure domain logic: states, transitions, job records, retry schedules. No I/O, no clock."""
