"""Special tokens shared by every kformer vocabulary.

Every vocabulary kformer builds (characters for arithmetic, words or subwords for text) puts
these four tokens first, so id 0 is always padding (``TokenAndPositionEmbedding`` masks it)
and the start/end ids are the same across tasks.
"""

PAD, UNK, START, END = "[PAD]", "[UNK]", "[START]", "[END]"
SPECIAL_TOKENS = (PAD, UNK, START, END)
PAD_ID, UNK_ID, START_ID, END_ID = range(4)
