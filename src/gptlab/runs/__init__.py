"""Run dirs, resume and sweep jobs: the files a run leaves (run_dir), one run per dir (the lock; launch's run-dir
guard takes it), whether a launch continues, restarts or refuses a dir (resume), what a continued run silences
(continuation) and how Lightning's counters move to another world size (relayout), and a sweep's jobs: what makes a
relaunch the same sweep, finished and failed jobs."""
