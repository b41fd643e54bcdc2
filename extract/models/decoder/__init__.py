"""Decoder vision-language models (generative VLMs): image -> vision tower -> projector -> image tokens
spliced into the prompt -> causal decoder.

Recognition is by likelihood (:mod:`.common`): for each (image, finding) one forward pass of the model's own
question template, the score is log P(yes) - log P(no) at the answer position. Maps come from the answer
position (:mod:`.maps`): its attention to the image tokens, rollout through the decoder, Chefer relevance and
Grad-CAM on the vision tokens entering the projector. :mod:`.capture` computes only the attention rows the maps
need. One module per model (``REGISTER`` as elsewhere in ``extract/models``).
"""
