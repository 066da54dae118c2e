"""The experiment engine: configs, the method registry, the one round loop both runtimes
drive, the in-process runtime, the experiment runner and what a run writes (report/)."""
