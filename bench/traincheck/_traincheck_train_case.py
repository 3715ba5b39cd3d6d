
import os
os.environ['TRAINCHECK_OUTPUT_DIR'] = "/tmp/w/tc_run/trace_healthy_mlp"

from traincheck.utils import register_custom_excepthook
if os.environ.get("TRAINCHECK_DEBUG") == "1":
    print("TRAINCHECK_DEBUG is set to 1, registering custom excepthook")
    register_custom_excepthook(True)

import traincheck.config.config as general_config
general_config.INSTR_DESCRIPTORS = False
general_config.MODEL_TRACKER_STYLE = 'proxy'
import traincheck.instrumentor.proxy_wrapper.proxy_config as proxy_config
proxy_config.__dict__.update({'proxy_log_dir': '/tmp/w/tc_run/trace_healthy_mlp/proxy_log.json'})

from traincheck.instrumentor.proxy_wrapper.proxy import Proxy

import glob
import importlib
from traincheck.instrumentor.proxy_wrapper.proxy_config import auto_observer_config
spec = importlib.util.find_spec('traincheck')
if spec and spec.origin:
    traincheck_folder = os.path.dirname(spec.origin)
else:
    raise Exception("traincheck is not installed properly")
enable_auto_observer_depth = auto_observer_config["enable_auto_observer_depth"]
neglect_hidden_func = auto_observer_config["neglect_hidden_func"]
neglect_hidden_module = auto_observer_config["neglect_hidden_module"]
observe_then_unproxy = auto_observer_config["observe_then_unproxy"]
observe_up_to_depth = auto_observer_config["observe_up_to_depth"]
from traincheck.static_analyzer.graph_generator.call_graph_parser import add_observer_given_call_graph

log_files = glob.glob(
    os.path.join(traincheck_folder, "static_analyzer", "func_level", "*.log")
)
for log_file in log_files:
    add_observer_given_call_graph(
        log_file,
        depth=enable_auto_observer_depth,
        observe_up_to_depth=observe_up_to_depth,
        neglect_hidden_func=neglect_hidden_func,
        neglect_hidden_module=neglect_hidden_module,
        observe_then_unproxy=observe_then_unproxy,
    )
"""One case of the doctor's suites (examples/public_bugs, examples/unseen_bugs) as a plain PyTorch
training script, for TrainCheck (PyPI `traincheck`, OSDI '25) to instrument: the case's own model,
optimizer, data, forward, loss and optimizer step, with no spikehunt in the loop. The variable
`model` is the model TrainCheck tracks; stages and steps are annotated as in its examples.

    SPIKEHUNT_CASE=healthy_mlp SPIKEHUNT_STEPS=40 traincheck-collect --pyscript train_case.py \\
        --models-to-track model --output-dir trace_healthy_mlp
"""
import os
import sys
import types
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, 'examples', 'public_bugs'))
sys.path.insert(0, os.path.join(ROOT, 'examples', 'unseen_bugs'))
import torch
from traincheck.instrumentor.tracer import Instrumentor
Instrumentor(torch, scan_proxy_in_args=True, use_full_instr=False, funcs_to_instr=None, API_dump_stack_trace=False, sampling_interval=1, warm_up_steps=1).instrument()
from traincheck import annotate_stage
from traincheck.instrumentor import META_VARS
import bugs
import cases
META_VARS['step'] = -1

def main():
    annotate_stage('init')
    name = os.environ['SPIKEHUNT_CASE']
    steps = int(os.environ.get('SPIKEHUNT_STEPS', '40'))
    lr = float(os.environ.get('SPIKEHUNT_LR', '0.05'))
    seed = int(os.environ.get('SPIKEHUNT_SEED', '0'))
    known = {**cases.BUGS, **cases.HEALTHY, **bugs.BUGS, **bugs.HEALTHY}
    torch.manual_seed(seed)
    config = types.SimpleNamespace(seed=seed, batch_size=64, threads=1, optimizer=types.SimpleNamespace(kind='sgd', lr=lr, momentum=0.9))
    case = known[name](config)
    model = case.model()
    model = Proxy(model, recurse=True, logdir=proxy_config.proxy_log_dir, var_name='model')
    optimizers = case.optimizers()
    optimizers = list(optimizers.values()) if isinstance(optimizers, dict) else [optimizers]
    annotate_stage('training')
    model.train()
    for _ in range(steps):
        from traincheck.instrumentor.control import start_step
        start_step()
        batch = case.next_batch()
        if batch is None:
            break
        META_VARS['step'] += 1
        inputs, targets = batch
        for opt in optimizers:
            opt.zero_grad()
        loss = case.loss(case.forward(inputs), targets)
        loss.backward()
        case.optimizer_step()
    annotate_stage('testing')
    model.eval()
    with torch.no_grad():
        for inputs, targets in case.heldout(256):
            case.loss(case.forward(inputs), targets)
if __name__ == '__main__':
    main()