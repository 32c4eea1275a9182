"""The ViT Explainer's model in the learner's browser: an ONNX export of the model that
returns what the Explainer draws (`graph`), and the data the browser needs beside it (the
k-NN bank, the open-set threshold, the layout: `bundle`)."""
