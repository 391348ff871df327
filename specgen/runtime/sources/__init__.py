"""Data-source readers: one module per source kind of specgen/kinds/sources, behind one interface.

A reader is a function `read(context: SourceContext) -> Source`, named by its kind's `SourceDef.reader`:
- `context` (context.py) knows the stage, the resolved source (`context.source`: path, features,
  labels), what each input and label must look like (`context.expected()`), and shares the checks every
  kind applies to values (`check_values`) and to in-memory arrays (`from_arrays`);
- it returns a `Source` (base.py): a tf.data.Dataset of (features, labels) examples, unbatched and in
  file order, and how many examples it holds. Readers of in-memory formats return
  `context.from_arrays(...)`; a streaming reader builds its own dataset and counts it.
A problem with the file is `context.fail(loc, message)`: one positioned error line. Examples the model cannot run
on its named dimensions (too small for its windows) are refused through sizes.py: `from_arrays` checks arrays, a
reader that resizes images checks the size it resizes to (`sizes.resized`) before reading a file.
Batching, shuffling, seeding and the iterator that checkpoints save are runtime/data.py's, which never
names a kind; so are the size checks (`context.enough`).
"""
