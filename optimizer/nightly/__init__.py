"""The nightly job: a night of iterations (`night`), its spending of the false-accept level, its
lock, the reaper of stray processes, the watch of merged patches and graduation."""
