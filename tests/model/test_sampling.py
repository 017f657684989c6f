"""Sampling by inverse CDF, and writing the samples into the masked positions."""

import numpy as np
import pytest
import tensorflow as tf

from electra_tf.model import sampling


def draw(probs, n, temperature=1.0, seed=0, disallowed=None):
    """n samples from one distribution, with numpy uniforms; returns (ids, uniforms)."""
    probs = np.asarray(probs, "float64")
    uniform = np.random.default_rng(seed).random((1, n)).astype("float32")
    logits = np.log(probs + 1e-30).astype("float32")
    logits = np.broadcast_to(logits, (1, n, probs.size))
    ids = sampling.sample(tf.constant(logits), tf.constant(uniform), temperature,
                          None if disallowed is None else tf.constant(disallowed))
    return ids.numpy()[0], uniform[0]


def frequencies(ids, vocab):
    return np.bincount(ids, minlength=vocab) / ids.size


def softmax(logits, temperature=1.0, disallowed=None):
    """float64 probabilities as `sample` draws from them: tempered, the disallowed id
    at 0."""
    z = np.asarray(logits, "float64") / temperature
    probs = np.exp(z - z.max(-1, keepdims=True))
    if disallowed is not None:
        np.put_along_axis(probs, np.asarray(disallowed)[..., None], 0.0, axis=-1)
    return probs / probs.sum(-1, keepdims=True)


def assert_inverse_cdf(ids, uniform, probs, tol=1e-5) -> int:
    """`ids` are the float64 inverse CDF of `uniform` under `probs` ([..., vocab]), but
    where a uniform lies within `tol` of the CDF step between the id expected and the id
    drawn, with no more than `tol` of mass between them (float32 sums the masses in
    another order); the drawn id always has mass. Returns how many differ."""
    cdf = np.cumsum(probs, -1)
    expected = np.minimum((cdf <= uniform[..., None]).sum(-1), probs.shape[-1] - 1)
    assert np.all(np.take_along_axis(probs, ids[..., None], -1) > 0), "an id of mass 0"
    differ = list(zip(*np.nonzero(ids != expected)))
    for where in differ:
        low, high = sorted((expected[where], ids[where]))
        step = cdf[where][low]
        assert abs(uniform[where] - step) <= tol, (where, ids[where], expected[where],
                                                    uniform[where], step)
        assert cdf[where][high - 1] - step <= tol, (where, "mass between the two ids")
    return len(differ)


def test_matches_a_known_distribution():
    probs = np.array([0.1, 0.4, 0.05, 0.3, 0.15])
    ids, _ = draw(probs, 20_000)
    assert ids.dtype == np.int32
    np.testing.assert_allclose(frequencies(ids, 5), probs, atol=0.01)


def test_inverse_cdf_exactly():
    probs = np.array([0.1, 0.4, 0.05, 0.3, 0.15])
    ids, uniform = draw(probs, 2_000, seed=1)
    assert assert_inverse_cdf(ids, uniform, np.broadcast_to(probs, (2_000, 5))) <= 2


@pytest.mark.parametrize("temperature", [0.5, 2.0])
def test_temperature(temperature):
    probs = np.array([0.1, 0.4, 0.05, 0.3, 0.15])
    ids, _ = draw(probs, 20_000, temperature=temperature)
    tempered = probs ** (1 / temperature)
    tempered /= tempered.sum()
    freq = frequencies(ids, 5)
    np.testing.assert_allclose(freq, tempered, atol=0.01)
    if temperature < 1:
        assert freq[1] > probs[1] + 0.05 and freq[2] < probs[2]   # sharper
    else:
        assert freq[1] < probs[1] - 0.05 and freq[2] > probs[2]   # flatter


def test_disallowed_ids_are_never_drawn():
    rng = np.random.default_rng(2)
    batch, positions, vocab = 4, 50, 7
    disallowed = rng.integers(0, vocab, (batch, positions)).astype("int32")
    logits = np.zeros((batch, positions, vocab), "float32")
    # Put almost all the mass on the forbidden token.
    np.put_along_axis(logits, disallowed[..., None], 8.0, axis=-1)
    uniform = rng.random((batch, positions)).astype("float32")
    free = sampling.sample(tf.constant(logits), tf.constant(uniform)).numpy()
    assert np.mean(free == disallowed) > 0.9   # without the exclusion it is drawn
    ids = sampling.sample(tf.constant(logits), tf.constant(uniform),
                          disallowed_ids=tf.constant(disallowed)).numpy()
    assert not np.any(ids == disallowed)
    assert np.all((ids >= 0) & (ids < vocab))


@pytest.mark.parametrize("vocab", [5, 128, 300, 1000])
def test_ids_in_range_even_at_the_top(vocab):
    rng = np.random.default_rng(vocab)
    logits = rng.normal(size=(3, 40, vocab)).astype("float32")
    uniform = rng.random((3, 40)).astype("float32")
    uniform[0, :4] = [0.0, 0.9999999, np.nextafter(np.float32(1), np.float32(0)), 0.5]
    ids = sampling.sample(tf.constant(logits), tf.constant(uniform)).numpy()
    assert ids.shape == (3, 40)
    assert np.all((ids >= 0) & (ids < vocab))


def test_vocab_not_a_multiple_of_128():
    vocab = 300  # three blocks, the last one partial
    probs = np.zeros(vocab)
    probs[[3, 130, 255, 256, 299]] = [0.2, 0.1, 0.3, 0.15, 0.25]
    ids, _ = draw(probs, 20_000, seed=3)
    freq = frequencies(ids, vocab)
    np.testing.assert_allclose(freq, probs, atol=0.01)
    assert set(np.unique(ids)) <= {3, 130, 255, 256, 299}


def test_matches_numpy_inverse_cdf_on_random_logits():
    rng = np.random.default_rng(4)
    vocab = 300
    logits = rng.normal(scale=2.0, size=(2, 500, vocab)).astype("float32")
    uniform = rng.random((2, 500)).astype("float32")
    ids = sampling.sample(tf.constant(logits), tf.constant(uniform)).numpy()
    assert assert_inverse_cdf(ids, uniform, softmax(logits)) <= 5   # of 1000


def test_deterministic_for_the_same_uniform():
    rng = np.random.default_rng(5)
    logits = tf.constant(rng.normal(size=(2, 16, 200)).astype("float32"))
    uniform = tf.constant(rng.random((2, 16)).astype("float32"))
    first = sampling.sample(logits, uniform).numpy()
    for _ in range(3):
        np.testing.assert_array_equal(sampling.sample(logits, uniform).numpy(), first)
    other = sampling.sample(logits, tf.constant(rng.random((2, 16)).astype("float32")))
    assert not np.array_equal(other.numpy(), first)


def test_works_inside_tf_function():
    fn = tf.function(sampling.sample)
    logits = tf.math.log(tf.constant([[[0.0, 1.0, 0.0], [0.5, 0.0, 0.5]]]) + 1e-9)
    assert fn(logits, tf.constant([[0.3, 0.9]])).numpy().tolist() == [[1, 2]]


def test_replace_masked_writes_only_weighted_positions():
    masked = np.array([[2, 4, 11, 4, 3, 0, 0],
                       [2, 12, 4, 13, 3, 0, 0]], "int32")
    positions = np.array([[1, 3, 0], [2, 0, 0]], "int32")
    weights = np.array([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]], "float32")
    sampled = np.array([[20, 21, 22], [23, 24, 25]], "int32")
    out = sampling.replace_masked(tf.constant(masked), tf.constant(positions),
                                  tf.constant(weights), tf.constant(sampled)).numpy()
    expected = masked.copy()
    expected[0, 1], expected[0, 3], expected[1, 2] = 20, 21, 23
    np.testing.assert_array_equal(out, expected)
    assert out[0, 0] == 2 and out[1, 0] == 2   # padding predictions leave position 0 alone



def test_log_probability_without_a_sure_generators_disallowed_id():
    """A generator 25 logits sure of the original token (P above 1 − 2⁻²⁴, which float32
    rounds to 1): the draw is uniform over the other 4 ids, so log p = log(1/4), and the
    disallowed logit, on which the draw does not depend, gets no gradient."""
    logits = tf.constant([[[25.0, 0.0, 0.0, 0.0, 0.0], [0.0, 25.0, 1.0, 0.0, 0.0]]])
    ids, disallowed = tf.constant([[3, 2]]), tf.constant([[0, 1]])
    with tf.GradientTape() as tape:
        tape.watch(logits)
        log_p = sampling.log_probability(logits, ids, disallowed_ids=disallowed)
    e = np.e
    np.testing.assert_allclose(log_p.numpy(), [[np.log(1 / 4), np.log(e / (e + 3))]],
                               rtol=1e-6)
    grads = tape.gradient(log_p, logits).numpy()
    assert grads[0, 0, 0] == 0.0 and grads[0, 1, 1] == 0.0
    np.testing.assert_allclose(grads[0, 0], [0.0, -0.25, -0.25, 0.75, -0.25], atol=1e-6)
    # At temperature 2 the renormalised softmax of logits / 2, as `sample` draws.
    half = sampling.log_probability(logits, ids, 2.0, disallowed)
    np.testing.assert_allclose(half.numpy()[0, 1], np.log(e**0.5 / (e**0.5 + 3)),
                               rtol=1e-6)


def test_log_probability_of_a_disallowed_draw_is_finite():
    """A padding slot may draw its own disallowed id (every other id at probability 0):
    0 there, never −inf, which a zero weight would turn into NaN."""
    logits = tf.constant([[[0.0, -200.0], [0.0, 1.0]]])
    log_p = sampling.log_probability(logits, tf.constant([[0, 1]]),
                                     disallowed_ids=tf.constant([[0, 0]]))
    assert log_p.numpy()[0, 0] == 0.0 and log_p.numpy()[0, 1] == 0.0


def test_compiled_draws_equal_eager_ones():
    """The train step's draws (XLA, a temperature tensor, disallowed ids) are the eager
    ones but where a uniform number falls within float rounding of a CDF step (XLA sums
    the block masses in another order); both are the float64 inverse CDF there, and
    neither ever draws a disallowed id."""
    rng = np.random.default_rng(8)
    logits = tf.constant(rng.normal(scale=3.0, size=(8, 50, 1000)).astype("float32"))
    uniform = tf.constant(rng.random((8, 50)).astype("float32"))
    disallowed = tf.constant(rng.integers(0, 1000, (8, 50)).astype("int32"))
    temperature = tf.constant(1.5)
    compiled = tf.function(sampling.sample, jit_compile=True)
    for ids in (None, disallowed):
        eager = sampling.sample(logits, uniform, temperature, ids).numpy()
        drawn = compiled(logits, uniform, temperature, ids).numpy()
        assert np.sum(drawn != eager) <= 2      # of 400
        probs = softmax(logits.numpy(), 1.5, None if ids is None else ids.numpy())
        for got in (eager, drawn):
            assert assert_inverse_cdf(got, uniform.numpy(), probs) <= 2
        if ids is not None:
            assert not np.any(eager == disallowed.numpy())
            assert not np.any(drawn == disallowed.numpy())


def test_round_off_never_draws_an_id_of_probability_zero():
    """A target just below the chosen block's first step (the block's offset subtracted
    in float32) or past its top (its entries summed in another order than its mass)
    lands on an entry of positive mass, not on the disallowed or padded ones around it."""
    mass = tf.constant([[0.0, 0.25, 0.75, 0.0]])        # ids 0 and 3 cannot be drawn
    cdf = tf.math.cumsum(mass, axis=-1)
    picks = [int(sampling._first_passing(cdf, mass, tf.constant([t]))[0])
             for t in (-1e-7, 0.0, 0.2, 0.25, 0.9, 1.0, 1.0 + 1e-7)]
    assert picks == [1, 1, 1, 2, 2, 2, 2]
    empty = tf.zeros([1, 4])                            # a degenerate row: the last entry
    assert int(sampling._first_passing(empty, empty, tf.constant([0.0]))[0]) == 3
