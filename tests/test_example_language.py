"""Research example (c), thesis ch. 4: two agents at one communication level, from library calls only.

Written as research code outside the repository would be: it imports ``jaxcomm`` and nothing
from ``experiments``. The student B learns to predict the teacher A's 16-bit message, with the
gradient fed back into A (eq. 4.2.7); a baseline pair on the same seed (same initialisation,
masks, minibatches and Gumbel noise) trains beside it in the same population.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxcomm import data, language

LENGTH, STEPS, EVAL_EVERY = 16, 300, 50


def test_two_agents_at_one_communication_level_from_library_calls():
    dataset = data.load_mnist_sample()  # real MNIST digits: 4,000 train, 1,000 validation, 1,000 test
    config = language.AgentsConfig(hidden=(32, 16), critic_hidden=32, batch_size=32, eval_every=EVAL_EVERY,
                                   diag_batch=32)
    members = [language.Member("student_feedback_to_teacher", seed=0), language.Member("baseline", seed=0)]
    result = language.train_agents(config, members, dataset, length=LENGTH, num_steps=STEPS, progress=False)

    assert result["status"] == "complete" and result["steps_done"] == STEPS and not result["interrupted"]
    feedback, baseline = result["members"]
    for m in (feedback, baseline):
        # One record per evaluation, every curve of the same length.
        assert m["steps"] == list(range(EVAL_EVERY, STEPS + 1, EVAL_EVERY))
        for key in ("val_accuracy", "disc_a", "agreement", "mi_bits_a", "distinct_a", "train_probe", "train_comm"):
            assert len(m[key]) == STEPS // EVAL_EVERY, key
        # The tracker's best is the curve's first maximum; test accuracy is read there, never chosen on.
        first_max = int(np.argmax(m["val_accuracy"]))  # the curve keeps 3 decimals
        assert round(m["best_val"], 3) == m["val_accuracy"][first_max] and m["best_step"] == m["steps"][first_max]
        # B's probe reads the digit from B's features well above chance (10 %): measured 30.6 / 36.5 % best
        # validation and 32.6 / 37.4 % test after 300 steps.
        assert m["best_val"] > 25.0 and m["test_accuracy"] > 25.0
        assert not m["collapsed"] and m["distinct_a"][-1] > 0.5  # informative, varied messages
        assert 0.0 <= min(m["disc_a"]) and max(m["disc_a"]) <= 1.0
    # The likelihood term exists only at the communication level: weight 0.005 x a cross-entropy of ~1-2 nats.
    assert all(v == 0.0 for v in baseline["train_comm"]) and all(0.0 < v < 0.02 for v in feedback["train_comm"])

    # Paired: the same seed sees through the same masks at both levels ...
    arrays = result["arrays"]
    np.testing.assert_array_equal(arrays.invert_a[0], arrays.invert_a[1])
    # ... and the feedback's gradient moved the teacher away from the baseline's teacher.
    gen_a = result["final_params"]["gen_a"]
    gap = sum(float(jnp.abs(leaf[0] - leaf[1]).sum()) for leaf in jax.tree_util.tree_leaves(gen_a))
    assert gap > 1e-3

    # The teacher's messages: LENGTH one-hot bits per digit, from its own view of the image.
    images = jnp.asarray(dataset.test.images[:8], jnp.float32).reshape(8, -1) / 255.0
    view = language.apply_view(images, arrays.invert_a[0], arrays.keep_a[0])
    teacher = jax.tree_util.tree_map(lambda leaf: leaf[0], gen_a)
    logits, _ = language.MessageGenerator(hidden=config.hidden, length=LENGTH).apply({"params": teacher}, view)
    messages = language.hard_message(logits)
    assert messages.shape == (8, LENGTH, 2)
    np.testing.assert_array_equal(np.asarray(messages).sum(-1), 1.0)
