"""The EAGLE-3 pipeline that runs on the box: prepare → extract → vocab → train → evaluate
(the stages, their order and inputs: the table in pipeline/stages/__init__.py).

It runs with the container's own python and ML stack, so it never imports `console` or
`remote`. Each stage is `python -m pipeline STAGE --config FILE`; it prints JSON progress lines
on stdout (see pipeline.progress), writes its outputs to temporary names first and its manifest
last, so a stage killed midway is never mistaken for complete.

Layer-id convention (one, end to end): a layer id L names the hidden state *entering* decoder
layer L of the target (so L = output of layer L-1; 0 would be the embeddings), and L = N (the
number of layers) names the last layer's output before the final norm. This is what vLLM's
`aux_hidden_state_layers` / `eagle_aux_hidden_state_layer_ids` mean when it serves a head, and
what speculators 0.9 writes. speculators 0.3's worker extension captures the *output of* layer L
instead; the extract stage translates (asks it for L-1), and the checkpoint's config records the
convention and the ids, so serving does not silently shift by a layer.
"""
