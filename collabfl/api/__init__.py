"""collabfl from Python: any method on your own model, data, loss and optimiser.

    import collabfl.api as cf

    result = cf.run("dpfl", model=make_net, train=train, val=val, test=test,
                    optimizer=lambda params: torch.optim.Adam(params, lr=1e-3),
                    overrides={"rounds": 10})
    print(result.mean_test_acc, [c.best_test_acc for c in result.clients])

``compare(methods, model, train, val, test, seeds=[0, 1, 2], out=...)`` runs several
methods over seeds and writes the results table and plots, as ``collabfl compare --seeds``.
Methods are spec strings or typed objects (``cf.DPFL(budget=3)``).

``run`` uses the in-process runtime (every client in this process). A real federation
takes the same config keys (``model.name``, ``training.loss``, ``training.optimizer`` as
import paths ``pkg.mod:attr``); each participant imports only the paths its operator allows
(``collabfl-client --allow-import``). examples/custom_model.py is a complete example.
"""

from collabfl.api.compare import compare
from collabfl.api.data import Split
from collabfl.api.methods import (
    DPFL,
    IPFL,
    Ditto,
    DPFLRandom,
    Equilibrium,
    FedAvg,
    FedAvgFT,
    FedCollab,
    FedProx,
    FedProxFT,
    Local,
    Method,
    PFedGraph,
)
from collabfl.api.results import ClientResult, Comparison, MethodComparison, RunResult
from collabfl.api.runner import run
from collabfl.kernel.models import ModelFactory
from collabfl.kernel.objective import LossFn, OptimizerFactory
from collabfl.kernel.user_code import UserCodeError

__all__ = [
    "DPFL",
    "IPFL",
    "ClientResult",
    "Comparison",
    "DPFLRandom",
    "Ditto",
    "Equilibrium",
    "FedAvg",
    "FedAvgFT",
    "FedCollab",
    "FedProx",
    "FedProxFT",
    "Local",
    "LossFn",
    "Method",
    "MethodComparison",
    "ModelFactory",
    "OptimizerFactory",
    "PFedGraph",
    "RunResult",
    "Split",
    "UserCodeError",
    "compare",
    "run",
]
