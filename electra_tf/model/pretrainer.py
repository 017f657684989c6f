"""`ElectraPretrainer`: generator → sampling → discriminator, for one masked batch.

    masked_input_ids ─► generator ─► MLM head at the masked positions ─► mlm_logits [B, P, V]
                                                                           │ sample (no grad)
    input_ids ◄── is_replaced ◄── corrupted_ids [B, S] ◄── sampled_ids [B, P]
                                        │
                                        ▼
                          discriminator ─► RTD head ─► disc_logits [B, S]

What the generator shares with the discriminator is `shape.tie` (`sizes.TIES`): one
`Embeddings` object (`embeddings`, the default), also the whole encoder (`all`: the
generator IS the discriminator's encoder), nothing (`none`: its own embeddings at its
own width), or the embeddings through a stop-gradient plus the discriminator's own
delta (`gdes`, `encoder.DisentangledEmbeddings`). The MLM head projects with the generator's token matrix. After pre-training
the discriminator (`embeddings` + `discriminator`) is the product; the generator is dropped.

That is the `electra` objective. `objective` (`model/objectives/`) chooses the forward
pass, the main encoder's head (`discriminator_head`: the RTD head, or an MLM head) and
whether a generator is built (`mlm` has none); the pre-trainer offers the passes
(`generate`, `generator_pass`, `sample`, `encode`) the objectives combine: a pass over a
batch is `objective.forward(model, batch, context)`, the `context.StepContext` carrying
the step's noise, dropout seed, temperature and recomputation mode. The main encoder keeps
the name `discriminator` under every objective: fine-tuning and export take it.

>>> import numpy as np
>>> from electra_tf.model import sizes
>>> tiny = sizes.SIZES["tiny"]
>>> model = ElectraPretrainer(30, sizes.ModelShape(tiny, sizes.generator_size(tiny, 0.5)))
>>> model = model.build_for(seq_length=8, num_predictions=2)
>>> batch = dummy_batch(batch_size=2, seq_length=8, num_predictions=2)
>>> noise = context_lib.StepContext(uniform=np.full((2, 2), 0.5, "float32"))
>>> outputs = model.objective.forward(model, batch, noise)
>>> outputs["mlm_logits"].shape, outputs["disc_logits"].shape
(TensorShape([2, 2, 30]), TensorShape([2, 8]))
>>> model.generator.embeddings is model.discriminator.embeddings
True
"""

import numbers

import keras
import numpy as np
import tensorflow as tf

from electra_tf.model import context as context_lib
from electra_tf.model import dropout as dropout_lib
from electra_tf.model import encoder
from electra_tf.model import heads
from electra_tf.model import objectives
from electra_tf.model import sampling
from electra_tf.model import sizes


_NOT_CALLED = ("An ElectraPretrainer is not called on a batch: build it with "
               "`model.build_for(seq_length, num_predictions)`, run a pass with "
               "`model.objective.forward(model, batch, context)`")


class ElectraPretrainer(keras.Model):
    """The ELECTRA generator and discriminator, trained jointly.

    A pass: `objective.forward(model, batch, context)` over a batch dict from
    `electra_tf.data.pipeline` (`input_ids`, `input_mask`, `segment_ids`,
    `masked_input_ids`, `masked_lm_positions`, `masked_lm_ids`, `masked_lm_weights`) in a
    `context.StepContext` (its `uniform`: `[B, P]` numbers that drive the sampling).
    Outputs (objective `electra`): `mlm_logits` [B, P, V], `sampled_ids` [B, P],
    `corrupted_ids` [B, S], `is_replaced` [B, S] (float32 0/1), `disc_logits` [B, S]
    (float32); other objectives' are in their modules.
    """

    def __init__(self, vocabulary_size: int, shape: sizes.ModelShape,
                 temperature: float = 1.0, disallow_correct: bool = False,
                 dropout: float = 0.1, objective="electra",
                 generator_trainable: bool = True, mask_prob: float = 0.15,
                 attention_dropout: float | None = None, **kwargs):
        super().__init__(**kwargs)
        if temperature <= 0:
            raise ValueError(f"`temperature` must be positive. Received: "
                             f"`temperature={temperature}`")
        shape.check()
        if not generator_trainable and shape.tie != "none":
            raise ValueError("A frozen generator needs embeddings of its own (the "
                             "discriminator trains shared ones). Received: "
                             f"`generator_trainable=False`, `shape.tie={shape.tie!r}`")
        self.vocabulary_size = vocabulary_size
        self.shape = shape
        self.temperature = temperature
        self.disallow_correct = disallow_correct
        self.dropout = dropout
        # On the attention probabilities; None: `dropout`.
        self.attention_dropout = dropout if attention_dropout is None else attention_dropout
        # The run's one objective (`model_config.objective`, its disc_weight the config's;
        # the trainer's losses and metrics use it), or one by name (`get_config` keeps it).
        self.objective = (objectives.OBJECTIVES.create(objective)
                          if isinstance(objective, str) else objective)
        self.generator_trainable = generator_trainable
        self.mask_prob = mask_prob  # the noise ratio of `electric`'s discriminator

        # === Layers ===
        def make_embeddings(size, name):
            return encoder.Embeddings(vocabulary_size, size.embedding_size,
                                      max_sequence_length=shape.max_positions,
                                      dropout=dropout, dtype=self.dtype_policy, name=name)

        def make_encoder(embeddings, size, name):
            return encoder.Encoder(embeddings, size.hidden_size, size.num_layers,
                                   size.num_heads, size.intermediate_size, dropout=dropout,
                                   attention_dropout=self.attention_dropout,
                                   dtype=self.dtype_policy, name=name)

        # Attributes in this order: Keras lists the variables (and the optimizer keeps its
        # slots) in the order they are set, so checkpoints of every version restore alike.
        self.embeddings = make_embeddings(shape.discriminator, "embeddings")
        # gdes: the generator reads `embeddings`; the discriminator a stop-gradient of its
        # token table plus a delta of its own.
        discriminator_embeddings = (
            encoder.DisentangledEmbeddings(self.embeddings, dtype=self.dtype_policy,
                                           name="discriminator_embeddings")
            if shape.tie == "gdes" else self.embeddings)
        discriminator = make_encoder(discriminator_embeddings, shape.discriminator,
                                     "discriminator")
        if not self.objective.uses_generator:
            self.generator = self.generator_head = None
        else:
            if shape.tie == "all":
                self.generator = discriminator
            else:
                generator_embeddings = (
                    make_embeddings(shape.generator, "generator_embeddings")
                    if shape.tie == "none" else self.embeddings)
                # An objective may build its own (`electric`: two causal towers).
                self.generator = self.objective.make_generator(self, generator_embeddings)
                if self.generator is None:
                    self.generator = make_encoder(generator_embeddings, shape.generator,
                                                  "generator")
            self.generator_head = heads.masked_lm_head(self.generator.embeddings,
                                                       dtype=self.dtype_policy)
        self.discriminator = discriminator
        self.discriminator_head = self.objective.make_head(self)

    @property
    def discriminator_size(self) -> sizes.EncoderSize:
        return self.shape.discriminator

    @property
    def generator_size(self) -> sizes.EncoderSize:
        return self.shape.generator

    @property
    def max_sequence_length(self) -> int:
        return self.shape.max_positions

    # === Forward ===
    def _as_input(self, value):
        """`value` (a float tensor or array) as Keras converts a model call's inputs:
        in the compute dtype under a mixed-precision policy (the sampling noise and
        temperature are rounded to it, as when they were the model's call arguments)."""
        return self.dtype_policy.convert_input(value, self.autocast, self.input_dtype)

    def generate(self, batch, context: context_lib.StepContext) -> dict:
        """The generator's pass and its samples at the context's temperature:
        `mlm_logits` [B, P, V], `sampled_ids` [B, P], `corrupted_ids` [B, S] (the masked
        input with the samples in place), `is_replaced` [B, S], `generator_hidden`
        [B, P, Hg] (its last layer at the masked positions) and `temperature` (a float32
        scalar)."""
        # Generator: MLM at the masked positions only (never over all S tokens).
        generated = self.generator_pass(batch["masked_input_ids"], batch, context)
        mlm_logits = tf.cast(self.generator_head(
            generated, mask_positions=batch["masked_lm_positions"],
            vocabulary_multiple=context.vocabulary_multiple), tf.float32)        # [B, P, V]
        # The generator's states at the masked positions: the adversarial algorithm's
        # baseline reads them (unused otherwise, and then pruned from the graph).
        hidden = tf.gather(generated, tf.cast(batch["masked_lm_positions"], tf.int32),
                           batch_dims=1)                                        # [B, P, Hg]
        return {"mlm_logits": mlm_logits, "generator_hidden": hidden,
                **self.sample(batch, mlm_logits, context)}

    def generator_pass(self, token_ids, batch, context: context_lib.StepContext):
        """The generator's encoder over `token_ids` [B, S] with the batch's segments and
        padding. A frozen one is a fixed language model: no dropout. Its dropout seed is
        the context's salted (`StepContext.salted`): the layers both passes share (the
        embeddings; every block under tie='all') would otherwise draw the same masks
        twice in one step."""
        with context_lib.entered(context.salted(1)):
            return self.generator({"token_ids": token_ids,
                                   "segment_ids": batch["segment_ids"],
                                   "padding_mask": batch["input_mask"]},
                                  training=context.training and self.generator_trainable)

    def sample(self, batch, mlm_logits, context: context_lib.StepContext) -> dict:
        """Samples of `mlm_logits` [B, P, V] at the context's temperature (else the
        model's), driven by its `uniform` noise (else drawn here), put in place of the
        masked positions: `sampled_ids` [B, P], `corrupted_ids` [B, S], `is_replaced`
        [B, S] and `temperature` (a float32 scalar)."""
        input_ids = batch["input_ids"]
        padding_mask = batch["input_mask"]
        # Sampling. The discriminator's loss must not train the generator (the paper
        # trains it by MLM only, and sampling is not differentiable anyway): stop here.
        # (The adversarial algorithm differentiates log p of the samples, not them.)
        if context.uniform is None:
            uniform = tf.random.uniform(tf.shape(batch["masked_lm_ids"]))
        else:
            uniform = self._as_input(context.uniform)
        temperature = tf.cast(self.temperature if context.temperature is None
                              else self._as_input(context.temperature), tf.float32)
        sampled_ids = sampling.sample(
            tf.stop_gradient(mlm_logits), uniform, temperature,
            batch["masked_lm_ids"] if self.disallow_correct else None)          # [B, P]
        corrupted_ids = sampling.replace_masked(
            batch["masked_input_ids"], batch["masked_lm_positions"],
            batch["masked_lm_weights"], sampled_ids)                             # [B, S]
        # A sample equal to the original token counts as original.
        is_replaced = tf.cast(tf.not_equal(corrupted_ids, tf.cast(input_ids, corrupted_ids.dtype)),
                              tf.float32) * tf.cast(padding_mask, tf.float32)    # [B, S]
        return {"sampled_ids": sampled_ids, "corrupted_ids": corrupted_ids,
                "is_replaced": is_replaced, "temperature": temperature}

    def encode(self, token_ids, batch, context: context_lib.StepContext):
        """The main encoder's (`discriminator`'s) pass over `token_ids` [B, S] with the
        batch's segments and padding: [B, S, H]."""
        with context_lib.entered(context):
            return self.discriminator({"token_ids": token_ids,
                                       "segment_ids": batch["segment_ids"],
                                       "padding_mask": batch["input_mask"]},
                                      training=context.training)

    def call(self, inputs, training=None):
        """Not a pass: the objective drives the model (the passes differ per objective)."""
        del inputs, training
        raise TypeError(_NOT_CALLED)

    def build(self, input_shape):
        """Creates every variable, in the model's name scope (Keras' build): one pass of
        the objective, not in training, over a dummy batch. `input_shape` is the pair
        `(seq_length, num_predictions)` (sequence length, predictions per sequence), not a
        batch's shapes: build through `build_for(seq_length, num_predictions)`; Keras
        calls this itself only to rebuild a saved model (its build config keeps the
        pair)."""
        if (not isinstance(input_shape, (tuple, list)) or len(input_shape) != 2
                or not all(isinstance(n, numbers.Integral) for n in input_shape)):
            raise TypeError(_NOT_CALLED)
        seq_length, num_predictions = input_shape
        self.objective.forward(
            self, dummy_batch(1, seq_length, num_predictions),
            context_lib.StepContext(uniform=np.zeros((1, num_predictions), "float32")))

    def build_for(self, seq_length: int, num_predictions: int):
        """Creates every variable (eagerly, e.g. inside `strategy.scope()`); a frozen
        generator's are then made non-trainable."""
        self.build((seq_length, num_predictions))
        dropout_lib.number_streams(self)
        if not self.generator_trainable:
            # config.train.generator=frozen (tie=none): no gradient and no optimizer slot
            # for any of its variables. After the build: Keras passes the flag to the
            # sublayers that exist when it is set, and the blocks' are built lazily.
            self.generator.trainable = self.generator_head.trainable = False
        return self

    def discriminator_variables(self):
        """The variables of the product: embeddings, discriminator encoder and head."""
        return _unique_weights(self.discriminator.embeddings, self.discriminator,
                               self.discriminator_head)

    def generator_variables(self):
        """The generator's: its encoder (with its embeddings, shared or not) and MLM head."""
        return _unique_weights(self.generator, self.generator_head)

    def language_model_variables(self):
        """The masked language model's: the generator's (`generator_variables`), or
        without a generator (`mlm`) the main encoder's and its MLM head's; every weight,
        in the order `config.model.generator_init` copies them."""
        if self.generator is None:
            return _unique_weights(self.discriminator, self.discriminator_head)
        return self.generator_variables()

    # === Config ===
    def get_config(self):
        config = super().get_config()
        config.update({
            "vocabulary_size": self.vocabulary_size,
            "shape": self.shape.to_dict(),
            "temperature": self.temperature,
            "disallow_correct": self.disallow_correct,
            "dropout": self.dropout,
            "attention_dropout": self.attention_dropout,
            "objective": self.objective.name,
            "disc_weight": self.objective.disc_weight,
            "generator_trainable": self.generator_trainable,
            "mask_prob": self.mask_prob,
        })
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config, shape=sizes.ModelShape.from_dict(config["shape"]))
        objective = objectives.OBJECTIVES.create(config.pop("objective"))
        objective.disc_weight = config.pop("disc_weight", objective.disc_weight)
        return cls(objective=objective, **config)


def _unique_weights(*layers):
    """The layers' weights in order, each once (shared layers hold the same variables)."""
    seen, out = set(), []
    for v in (v for layer in layers for v in layer.weights):
        if id(v) not in seen:
            seen.add(id(v))
            out.append(v)
    return out


def dummy_batch(batch_size: int, seq_length: int, num_predictions: int) -> dict:
    """A batch of the pipeline's structure (zeros, one real token), for building."""
    ids = np.zeros((batch_size, seq_length), "int32")
    predictions = np.zeros((batch_size, num_predictions), "int32")
    mask = ids.copy()
    mask[:, 0] = 1
    return {"input_ids": ids, "input_mask": mask, "segment_ids": ids,
            "masked_input_ids": ids, "masked_lm_positions": predictions,
            "masked_lm_ids": predictions,
            "masked_lm_weights": predictions.astype("float32")}

