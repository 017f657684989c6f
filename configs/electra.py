"""ELECTRA pre-training configs: `--config=configs/electra.py:SIZE`, SIZE in tiny|small|base|large.

    python -m electra_tf.train --config=configs/electra.py:small --workdir=/tmp/electra_small \
        --config.data.train_files=/data/pretrain --config.data.vocab_file=/data/vocab.txt

Any field can be overridden with `--config.SECTION.KEY=VALUE`; an unknown key is an error.
Defaults are the paper's (Clark et al. 2020, Appendix A, Table 6) for small, base and large;
`tiny` is ours, to learn something in minutes on a CPU.
"""

import ml_collections

# Per size: (batch_size, train steps, learning_rate, generator_hidden_fraction). The paper's
# Small/Base/Large; Large trains 400k steps at batch 2048 (the 1.75M-step run needs 1.75M).
_PAPER = {
    "tiny": (32, 300, 2e-3, 0.5),
    "small": (128, 1_000_000, 5e-4, 0.25),
    "base": (256, 766_000, 2e-4, 1 / 3),
    "large": (2048, 400_000, 2e-4, 0.25),
}


def get_config(size: str = "small") -> ml_collections.ConfigDict:
    """The config for one model size."""
    if size not in _PAPER:
        raise ValueError(f"unknown size {size!r}; choose one of {', '.join(_PAPER)}")
    batch_size, steps, learning_rate, generator_fraction = _PAPER[size]
    tiny = size == "tiny"
    config = ml_collections.ConfigDict()

    config.data = ml_collections.ConfigDict()
    config.data.train_files = ""        # dir (with manifest.json), glob or comma list
    config.data.eval_files = ""         # the same, held-out; "" = no evaluation
    config.data.vocab_file = ""         # the vocab.txt the data was made with
    config.data.max_seq_length = 128    # paper: 128 (512 for the last 10% of Large is not used)
    config.data.mask_prob = 0.25 if size == "large" else 0.15  # paper: 15% of tokens
                                        # masked, 25% for Large (Table 6)
    config.data.mask_token_rate = 0.85  # of those, share set to [MASK]; the rest unchanged
    config.data.random_token_rate = 0.0  # share set to a random token (BERT: 0.1)
    config.data.whole_word_masking = False  # mask whole words (a word and its ## pieces);
                                            # paper: off (tokens)
    config.data.shuffle_buffer = 10_000  # examples per shuffled block, per input pipeline
    config.data.skip_damaged_shards = False  # True: read every shard at start, leave out
                                             # damaged ones (else: an error naming them)

    config.model = ml_collections.ConfigDict()
    # The shape (electra_tf/model_config.py): `size` is the preset that fills every
    # dimension left at 0; a run's config.json records the resolved shape.
    config.model.size = size                  # tiny|small|base|large (model/sizes.py)
    config.model.hidden_size = 0              # H; paper: 256/768/1024
    config.model.num_layers = 0               # L; paper: 12/12/24
    config.model.num_heads = 0                # attention heads; paper: 4/12/16
    config.model.intermediate_size = 0        # FFN width; paper: 4 x H
    config.model.embedding_size = 0           # E; paper: 128/768/1024
    config.model.max_position_embeddings = 512  # position table rows; paper: 512
    config.model.generator_hidden_fraction = generator_fraction  # paper: 1/4, 1/3, 1/4
    config.model.generator_layer_fraction = 1.0  # paper: generator as deep as discriminator
    config.model.generator_hidden_size = 0    # 0: H x generator_hidden_fraction
    config.model.generator_num_layers = 0     # 0: L x generator_layer_fraction
    config.model.generator_num_heads = 0      # 0: one per 64 units (H's heads at width H)
    config.model.generator_intermediate_size = 0  # 0: 4 x its hidden (F at width H)
    config.model.generator_embedding_size = 0  # tie=none only; 0: its hidden (original)
    config.model.tie = "embeddings"           # none|embeddings|all|gdes: what the generator
                                              # shares; paper: embeddings (GLUE 83.6 none,
                                              # 84.3 embeddings, 84.4 all, Sec. 3.2)
    config.model.tie_embeddings = True        # older spelling: False is tie=none
    config.model.objective = "electra"        # electra|electra_15|mlm|replace_mlm|
                                              # all_tokens_mlm|electric (model/objectives/,
                                              # docs/electric.md); paper:
                                              # electra (GLUE 85.0; Table 5: all_tokens_mlm
                                              # 84.3, replace_mlm 82.4, electra_15 82.4,
                                              # mlm = BERT 82.2)
    config.model.temperature = 1.0            # sampling temperature (a schedule's start);
                                              # paper: 1.0
    config.model.temperature_schedule = "constant"  # constant|linear|cosine: from
                                              # temperature to 1.0 over temperature_steps;
                                              # paper: constant; Fast-ELECTRA: descending
    config.model.temperature_steps = 0        # steps to reach 1.0; 0: train.steps
    config.model.generator_init = ""          # a run's workdir (ours, or converted by
                                              # tools/convert_checkpoint.py): the generator
                                              # starts from its MLM; paper: none (fresh)
    config.model.disallow_correct = False     # never sample the original token; paper: off
    config.model.disc_weight = 50.0           # lambda, the RTD loss weight; paper: 50
    config.model.dropout = 0.1                # paper: 0.1
    config.model.attention_dropout = 0.1      # on the attention probabilities; paper:
                                              # 0.1; 0 removes a pass over [B, h, S, S]
                                              # (ModernBERT and Cramming train without)

    config.train = ml_collections.ConfigDict()
    config.train.batch_size = batch_size      # global batch; paper: 128/256/2048 (GPUs,
                                              # TPUs: docs/accelerators.md)
    config.train.steps = steps                # paper: 1M/766k/400k
    config.train.learning_rate = learning_rate  # peak; paper: 5e-4/2e-4/2e-4
    config.train.warmup_steps = 30 if tiny else 10_000  # paper: 10k, then linear decay to 0
    config.train.optimizer = "adamw"          # adamw|lamb; paper: Adam with weight decay
    config.train.weight_decay = 0.01          # paper: 0.01 (not on LayerNorm and biases)
    config.train.adam_beta1 = 0.9             # paper: 0.9
    config.train.adam_beta2 = 0.999           # paper: 0.999
    config.train.adam_epsilon = 1e-6          # paper: 1e-6
    config.train.adam_bias_correction = tiny  # adamw's; the original: none (BERT's
                                              # AdamWeightDecayOptimizer), which its
                                              # learning rates are for; tiny (ours):
                                              # tuned with it
    config.train.clip_norm = 1.0              # global-norm clipping; paper: 1.0
    config.train.steps_per_loop = 10 if tiny else 100  # steps per tf.function call
                                              # (TPUs: 500-1000, docs/accelerators.md)
    config.train.checkpoint_every = 100 if tiny else 5_000  # steps (a loop ends there)
    config.train.keep_checkpoints = 3         # checkpoints kept (the newest)
    config.train.log_every = 20 if tiny else 100  # steps between log lines and summaries
    config.train.eval_every = 100 if tiny else 10_000  # steps between evaluations
    config.train.eval_steps = 20 if tiny else 100  # batches per evaluation
    config.train.eval_predictions = 3         # held-out sequences shown at each evaluation
                                              # (TensorBoard text "predictions"); 0: none
    config.train.profile_steps = 0            # N > 0: a TensorBoard profile (Profile tab)
                                              # of N steps after the first loop (compiled)
    config.train.algorithm = "joint"          # joint|two_stage|adversarial (training/
                                              # algorithms/); paper: joint (two-stage and
                                              # adversarial did not help)
    config.train.two_stage_generator_steps = 0  # two_stage: steps the generator trains
                                              # alone (MLM) before the discriminator,
                                              # initialised from it, trains alone (RTD);
                                              # 0: half of steps (paper: n steps each);
                                              # needs the generator of the
                                              # discriminator's shape and tie=none
    config.train.generator = "train"          # train|frozen (no gradients, no optimizer
                                              # state; needs tie=none); paper: train;
                                              # Fast-ELECTRA: frozen
    config.train.adversarial_mlm_weight = 0.0  # adversarial: weight of the generator's
                                              # MLM loss beside its policy gradient;
                                              # paper: none (0)
    config.train.seed = 0                     # init, data order, sampling
    config.train.mixed_precision = "auto"     # auto|float32|bfloat16|float16 (auto: bf16 on
                                              # TPU and Ampere+ GPUs, fp16 older GPUs, fp32 CPU)
    config.train.jit_compile = True           # XLA for the training step
    config.train.xla_scope = "auto"           # auto|whole_step|forward_backward: what XLA
                                              # compiles (auto: the whole step on TPUs and
                                              # one GPU, the forward/backward pass on CPUs
                                              # and under mirrored/multi-worker strategies;
                                              # on a TPU forward_backward launches one
                                              # step at a time: a fallback)
    config.train.accumulation_steps = 1       # N micro-batches per step (gradient
                                              # accumulation): less memory, same result
    config.train.remat = "auto"               # auto|none|selective|blocks: what the backward
                                              # pass recomputes (less memory): selective,
                                              # the FFN's gelu, the attention core and
                                              # its output projection (model/remat.py);
                                              # blocks, whole blocks; auto: none on a
                                              # GPU/TPU whose memory holds the step
                                              # (one micro-batch's activations), else
                                              # selective (always on CPUs)
    config.train.vocabulary_padding = "auto"  # auto|none|tiles: the projection onto the
                                              # vocabulary on a table padded to a
                                              # multiple of 128 (tiles) or not (none);
                                              # auto: tiles on GPUs/TPUs, none on CPUs

    config.runtime = ml_collections.ConfigDict()
    config.runtime.strategy = "auto"          # auto|tpu|mirrored|multi_worker|one_device
    config.runtime.tpu = ""                   # TPU name or grpc:// address ("" = local)
    config.runtime.cpu_devices = 0            # split the CPU into N logical devices (to try
                                              # mirrored without accelerators); 0 = off
    return config
