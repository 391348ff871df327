"""Where `specgen train` runs its steps: one device, replicas on one machine, or workers across machines.

- default.py: `Distribution`, the one device (TensorFlow's default-strategy idea): the session and the loop call
  its methods and never ask which placement they hold.
- replicas.py: `Replicas`, the same interface over a tf.distribute strategy (MirroredStrategy, and
  MultiWorkerMirroredStrategy across machines), and how the spec's semantics survive replicas.
- cluster.py: this process's place in a multi-worker run, from TF_CONFIG, validated before TensorFlow reads it.
- positions.py: the data positions of workers that read disjoint files, saved with each checkpoint.
"""
