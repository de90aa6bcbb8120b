"""cnn_n1_b64's network (the benchmark's row: one CNN node, batch 64) built with backend and step loop "auto" from an
empty cache in a fresh process, as the row's cold choice is; prints what auto chose and its cached timings.

    python -m experiments.benchmark.probes.cold_probe
"""
import json
import os
import tempfile
import time

from experiments.benchmark import bench
from jaxcomm import network, speed

cache = tempfile.mkdtemp()
os.environ[speed.CACHE_ENV], os.environ[speed.AUTOTUNE_ENV] = cache, "1"
model, dataset = bench.model_and_data("cnn")
config = network.NetworkConfig(num_nodes=1, content="none", batch_size=64, num_neighbours=0, backend="auto",
                               step_loop="auto", num_steps=1000)
start = time.perf_counter()
net = network.make_network(config, model, image_shape=dataset.train.images.shape[1:], num_classes=10)
print(net.backend, net.step_loop, f"{time.perf_counter() - start:.1f} s")
print(json.dumps(json.loads(open(os.path.join(cache, "choices.json")).read()), indent=1))
