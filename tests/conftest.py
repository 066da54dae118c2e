"""Shared test setup."""

import torch

# The models under test are tiny: one thread is fastest and avoids oversubscribing a shared
# two-core machine when other processes (benchmarks, a second test run) are busy.
torch.set_num_threads(1)
