"""Bytes on the wire and parameter counts (jaxcomm.bandwidth), and the equilibrium broadcast rate (jaxcomm.inbox)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxcomm import bandwidth, inbox, topology
from jaxcomm.models import MLP, StridedCNN


def test_allreduce_bytes_by_hand():
    assert bandwidth.allreduce_bytes(1, 1000) == 0
    assert bandwidth.allreduce_bytes(2, 100) == 400  # 2 x 1/2 x 4 x 100
    assert bandwidth.allreduce_bytes(10, 174_426) == pytest.approx(1_255_867.2)  # 2 x 9/10 x 4 x P
    assert bandwidth.allreduce_bytes(4, 1000, bytes_per_value=2) == 3000  # 2 x 3/4 x 2 x 1000
    # The same float as the formula written out (results tables print it).
    for n in (1, 2, 3, 7, 10, 100):
        for p in (1, 174_426, 701_514):
            assert bandwidth.allreduce_bytes(n, p) == 2.0 * (n - 1) / n * 4 * p


def test_num_params_of_arrays_and_shapes():
    tree = {"a": jnp.zeros((3, 4)), "b": [np.zeros(5), jnp.zeros(())]}
    assert bandwidth.num_params(tree) == 12 + 5 + 1
    shapes = jax.tree_util.tree_map(lambda x: jax.ShapeDtypeStruct(np.shape(x), np.float32), tree)
    assert bandwidth.num_params(shapes) == 18
    assert bandwidth.num_params({}) == 0
    assert isinstance(bandwidth.num_params(tree), int)


def test_model_num_params_by_hand():
    assert bandwidth.model_num_params(MLP(hidden=(16,)), (28, 28, 1)) == 784 * 16 + 16 + 16 * 10 + 10
    cnn = StridedCNN(widths=(16, 32, 64), hidden=128, norm="batch")
    # conv 4x4x3x16 + bias; 4x4x16x32 + BatchNorm scale, bias; 4x4x32x64 + BatchNorm; dense 1024-128; 128-10.
    params = (4 * 4 * 3 * 16 + 16) + (4 * 4 * 16 * 32 + 2 * 32) + (4 * 4 * 32 * 64 + 2 * 64) \
        + (4 * 4 * 64 * 128 + 128) + (128 * 10 + 10)
    assert params == 174_426
    assert bandwidth.model_num_params(cnn, (32, 32, 3)) == params
    # Every variable: the BatchNorm running mean and variance too.
    assert bandwidth.model_num_params(cnn, (32, 32, 3), all_variables=True) == params + 2 * 32 + 2 * 64


def test_equilibrium_broadcast_prob():
    # The thesis' 10 fully connected nodes consuming half the time: each broadcasts 0.5 / 9 of its steps.
    assert inbox.equilibrium_broadcast_prob(0.5, 9) == 0.5 / 9
    assert inbox.equilibrium_broadcast_prob(0.5, 4, 2.0) == 0.25
    assert inbox.equilibrium_broadcast_prob(0.5, 1) == 0.5
    assert inbox.equilibrium_broadcast_prob(0.5, 1, factor=3.0) == 1.0  # a probability: at most 1
    assert inbox.equilibrium_broadcast_prob(0.0, 3) == 0.0
    with pytest.raises(ValueError, match="num_neighbours must be >= 1"):
        inbox.equilibrium_broadcast_prob(0.5, 0)
    # Arrivals per node and step (in-degree x p_b) equal consumption p_c on regular graphs.
    for adj in (topology.full(10), topology.ring(7, 3), topology.exponential(8)):
        p = int(topology.out_degree(adj)[0])
        arrivals = np.asarray(topology.in_degree(adj)) * inbox.equilibrium_broadcast_prob(0.5, p)
        np.testing.assert_allclose(arrivals, 0.5)


def test_equilibrium_broadcast_prob_is_the_experiments_float():
    # The expressions the experiments wrote before (their committed configs hold these floats).
    for p_c in (0.1, 0.25, 0.5, 0.75, 0.9):
        for fanout in range(1, 100):
            assert inbox.equilibrium_broadcast_prob(p_c, fanout) == p_c / fanout
            for factor in (0.5, 1.0, 2.0, 3):
                assert inbox.equilibrium_broadcast_prob(p_c, fanout, factor) == min(1.0, factor * p_c / fanout)
