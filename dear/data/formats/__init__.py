"""Dataset formats: one module per format, behind one registry, read the same way for every dataset.

A reader turns a `Declaration` (`dear.data.declaration`) into `Found`: one
path, class key and split per image, in the format's order, without opening
an image. Everything the formats share (labels, class names, the canonical
order, the validation split carved from train, base classes, classes
without training or test images, a file listed twice) is done once, by
`dear.data.listing`, so a reader only walks its layout and names what is
wrong with it. The next format is one module with a `read(declaration) ->
Found`, listed in `READERS`.

`READERS` are the formats a dataset of one's own declares (`data.custom`);
`FORMATS` adds the layouts of CoOp's datasets that have no split JSON
(ImageNet and its domain-shift sets, FGVC-Aircraft), which only the built-in
declarations use. CoOp's split JSON is `coop-json` for both.
"""

from __future__ import annotations

from typing import Callable

from dear.data.formats import coop_json, coop_layouts, csvfile, imagefolder
from dear.data.found import Found  # noqa: F401 (what every reader returns)

READERS: dict[str, Callable] = {"imagefolder": imagefolder.read, "csv": csvfile.read, "coop-json": coop_json.read}
FORMATS: dict[str, Callable] = {
    **READERS, "coop-imagenet": coop_layouts.read_imagenet, "coop-imagenet-v2": coop_layouts.read_imagenet_v2,
    "coop-imagenet-subset": coop_layouts.read_imagenet_subset, "coop-fgvc": coop_layouts.read_fgvc_aircraft}
