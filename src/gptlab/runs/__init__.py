"""Run dirs and sweep jobs: the files a run leaves (run_dir), one run per dir (the lock; runtime's Hydra callback
takes it), whether a launch continues, restarts or refuses a dir (resume), and a sweep's jobs: what makes a
relaunch the same sweep, finished and failed jobs."""
