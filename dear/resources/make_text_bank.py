"""Generate `text_bank.tsv`: the default text bank of the `profile` stage.

Short image descriptions written for this project, each describing one
concept only (so its label is exact): thirteen concepts, the five core
attributes of DeAR (color, shape, texture, object, position) and eight
others (scene, count, style, material, action, lighting, weather, size).
Two registers are mixed:
- the embedded world's caption grammar and vocabulary ("a photo of a thing
  on a striped background.", every usable OpenMoji object name, the world's
  colours, textures, shapes, grid positions and styles), so heads of the
  embedded backbone meet texts it can read;
- general photo descriptions for real CLIP models.

Run `python -m dear.resources.make_text_bank` to rewrite the file; the output
is deterministic (fixed lists, fixed order, first occurrence of a text wins).
"""

from __future__ import annotations

import re
import sys
from itertools import product
from pathlib import Path

from dear.data.world_emoji import catalog
from dear.data.world_scene import COLORS, POSITION_NAMES, SHAPES, STYLES, TEXTURES

OUT = Path(__file__).resolve().parent / "text_bank.tsv"

# --- vocabularies ------------------------------------------------------------------
COLOR_WORDS = list(COLORS) + [
    "black", "white", "grey", "beige", "turquoise", "magenta", "violet", "gold", "silver", "maroon", "navy blue",
    "teal", "olive green", "lime green", "crimson", "ivory", "dark blue", "light green", "pale yellow",
    "bright red", "dark green", "light blue", "hot pink", "tan", "lavender", "coral"]
SHAPE_WORDS = list(SHAPES) + [
    "oval", "rectangle", "pentagon", "octagon", "diamond shape", "crescent shape", "heart shape", "arrow",
    "spiral", "ring", "cone", "cube", "sphere", "cylinder", "zigzag line", "wavy line", "semicircle",
    "rhombus", "straight line", "curved line"]
TEXTURE_WORDS = list(TEXTURES) + [
    "smooth", "rough", "fuzzy", "furry", "grainy", "bumpy", "polka-dot", "plaid", "woven", "scaly", "wrinkled",
    "speckled", "marbled", "rippled", "knitted", "honeycomb", "zigzag", "crackled", "fibrous", "porous",
    "braided", "lacy", "pitted", "frilly"]
POSITION_WORDS = list(dict.fromkeys(POSITION_NAMES[3] + POSITION_NAMES[2])) + [
    "left side", "right side", "upper half", "lower half", "edge", "corner", "far left", "far right"]
SCENE_WORDS = [
    "beach", "forest", "kitchen", "busy street", "office", "mountain top", "desert", "city", "park", "farm",
    "classroom", "stadium", "coral reef", "snowy field", "living room", "airport", "library", "garden",
    "river bank", "bedroom", "supermarket", "train station", "harbor", "jungle", "cave", "highway", "bridge",
    "restaurant", "playground", "hospital", "museum", "church", "lake", "waterfall", "parking lot",
    "swimming pool", "bakery", "laboratory", "factory", "village", "meadow", "canyon", "subway", "market",
    "bathroom", "backyard"]
COUNT_WORDS = [
    "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "a dozen", "a pair of",
    "a few", "several", "many", "dozens of", "hundreds of", "a single", "a couple of", "countless"]
COUNT_NOUNS = ["things", "objects", "items", "animals", "people", "cars", "birds", "flowers"]
STYLE_WORDS = list(STYLES) + [
    "painting", "watercolor", "cartoon", "pixel art", "3d render", "oil painting", "pencil drawing",
    "black and white photo", "comic strip", "mosaic", "embroidery", "origami", "graffiti", "blueprint",
    "line drawing", "vintage photo", "charcoal drawing", "children's drawing", "woodcut print", "tattoo",
    "sculpture", "doodle", "infographic", "low poly render", "stained glass window", "anime drawing",
    "polaroid photo", "collage", "digital illustration"]
MATERIAL_WORDS = [
    "wood", "metal", "glass", "plastic", "stone", "paper", "fabric", "leather", "concrete", "ceramic",
    "rubber", "marble", "cardboard", "clay", "wool", "steel", "bronze", "porcelain", "cotton", "silk",
    "bamboo", "brick", "ice", "copper", "velvet", "wicker", "granite", "denim", "foam", "cork"]
ACTION_WORDS = [
    "running", "jumping", "swimming", "eating", "sleeping", "flying", "dancing", "reading", "cooking",
    "driving", "climbing", "singing", "throwing a ball", "riding a bike", "walking", "sitting", "fighting",
    "playing", "laughing", "crying", "painting", "writing", "skiing", "surfing", "fishing", "diving",
    "waving", "hugging", "drinking", "kicking", "pushing", "pulling", "lifting", "falling", "shouting",
    "typing", "playing guitar", "skateboarding", "crawling", "stretching"]
LIGHTING_WORDS = [
    "at night", "in bright sunlight", "in deep shadow", "backlit", "in dim light", "under neon lights",
    "by candle light", "at golden hour", "with harsh flash", "in soft light", "under a spotlight",
    "at dusk", "at dawn", "with strong shadows", "in low light", "overexposed", "underexposed",
    "with lens flare", "under fluorescent light", "lit from the side", "in moonlight", "glowing",
    "silhouetted", "in high contrast"]
WEATHER_WORDS = [
    "rainy", "snowy", "foggy", "sunny", "cloudy", "stormy", "windy", "misty", "hazy", "icy",
    "overcast", "drizzly", "thundery", "frosty", "humid", "clear"]
SIZE_WORDS = [
    "tiny", "small", "large", "huge", "giant", "miniature", "enormous", "little", "big", "massive",
    "microscopic", "oversized", "medium-sized", "towering", "petite", "colossal"]
GENERAL_OBJECTS = [
    "dog", "cat", "car", "bicycle", "chair", "table", "laptop", "phone", "cup", "bottle", "airplane", "boat",
    "horse", "bird", "tree", "flower", "house", "clock", "book", "lamp", "shoe", "hat", "guitar", "piano",
    "sofa", "bed", "television", "camera", "umbrella", "backpack", "bus", "train", "truck", "motorcycle",
    "elephant", "giraffe", "zebra", "bear", "lion", "tiger", "monkey", "rabbit", "fish", "frog", "snake",
    "turtle", "spider", "butterfly", "bee", "apple", "banana", "pizza", "sandwich", "cake", "bowl", "spoon",
    "knife", "fork", "scissors", "key", "door", "window", "mirror", "bag", "wallet", "watch", "ring",
    "necklace", "kite", "ball", "teddy bear", "toothbrush", "hair dryer", "vase", "plant", "tent", "bench",
    "fire hydrant", "traffic light", "stop sign", "parking meter", "helicopter", "rocket", "tractor",
    "ambulance", "violin", "drum", "trumpet", "microscope", "telescope", "hammer", "screwdriver", "ladder",
    "bucket", "candle", "pillow", "blanket", "towel", "toilet", "sink", "oven", "fridge", "kettle", "toaster"]

# --- templates: {} is the concept word; nothing else in a template names another concept ---
TEMPLATES = {
    "color": ["a photo of a thing on a {} background.", "a {} background.", "something {}.", "a {} image.",
              "the color {}.", "a mostly {} picture.", "bright {} tones.", "a {} thing.", "everything is {}.",
              "a photo in {}."],
    "shape": ["a photo of a thing next to a {}.", "a {}.", "the outline of a {}.", "something shaped like a {}.",
              "a simple {}.", "a drawing of a {}.", "a {} outline.", "a thing in the form of a {}."],
    "texture": ["a photo of a thing on a {} background.", "a {} pattern.", "a {} texture.", "a {} surface.",
                "a close look at a {} texture.", "a background with a {} pattern.", "something {}.",
                "a {} backdrop."],
    "object": ["a photo of a {}.", "a {}.", "a picture of a {}.", "a close-up of a {}.", "there is a {}."],
    "position": ["a photo of a thing at the {}.", "something at the {}.", "a thing in the {}.",
                 "an object placed at the {}.", "at the {} of the image.", "the thing is at the {}.",
                 "something on the {}.", "a picture with something at the {}."],
    "scene": ["a photo taken at a {}.", "a view of a {}.", "inside a {}.", "a {} scene.", "somewhere in a {}.",
              "the setting is a {}."],
    "count": ["{} " + noun + "." for noun in COUNT_NOUNS] + ["a photo of {} " + noun + "." for noun in COUNT_NOUNS],
    "style": ["a {} of a thing.", "a {}.", "in the style of a {}.", "this is a {}.", "a {} of something.",
              "an image made as a {}."],
    "material": ["something made of {}.", "a {} surface.", "an object of {}.", "it is made of {}.",
                 "a {} thing.", "a close-up of {}."],
    "action": ["someone {}.", "a person {}.", "an animal {}.", "a photo of someone {}.", "a child {}."],
    "lighting": ["a photo taken {}.", "a scene {}.", "something {}.", "a picture {}.", "an image {}."],
    "weather": ["a {} day.", "{} weather.", "a photo on a {} day.", "the sky is {}.", "outside it is {}."],
    "size": ["a {} thing.", "something {}.", "a {} object.", "a photo of something {}.", "it looks {}."],
}


def world_rows() -> list[tuple[str, str]]:
    """The embedded world's vocabulary in its caption grammar."""
    rows = [(f"a photo of a {name}.", "object") for _, name in catalog()]
    rows += [("a sketch of a thing.", "style"), ("a photo of a thing.", "style")]
    return rows


SINGULAR = ("one", "a single")  # count words that take a singular noun
PLURALS = {"things": "thing", "objects": "object", "items": "item", "animals": "animal", "people": "person",
           "cars": "car", "birds": "bird", "flowers": "flower"}


def _singular(template: str) -> str:
    for plural, single in PLURALS.items():
        template = template.replace(f" {plural}.", f" {single}.")
    return template


def _world_grammar(template: str) -> bool:
    """The world's caption forms keep its grammar ("a" before every noun), as its captions do."""
    return template.startswith("a photo of a thing") or template == "a photo of a {}."


def _articles(text: str) -> str:
    return re.sub(r"\b([Aa]) (?=[aeiou])", r"\1n ", text)


def concept_rows() -> list[tuple[str, str]]:
    words = {"color": COLOR_WORDS, "shape": SHAPE_WORDS, "texture": TEXTURE_WORDS, "object": GENERAL_OBJECTS,
             "position": POSITION_WORDS, "scene": SCENE_WORDS, "count": COUNT_WORDS, "style": STYLE_WORDS,
             "material": MATERIAL_WORDS, "action": ACTION_WORDS, "lighting": LIGHTING_WORDS,
             "weather": WEATHER_WORDS, "size": SIZE_WORDS}
    rows = []
    for concept, vocabulary in words.items():
        for template, word in product(TEMPLATES[concept], vocabulary):
            text = (_singular(template) if word in SINGULAR else template).format(word)
            rows.append((text if _world_grammar(template) else _articles(text), concept))
    return rows


def bank_rows() -> list[tuple[str, str]]:
    """Every (text, concept), first occurrence of a text wins."""
    kept: dict[str, str] = {}
    for text, concept in world_rows() + concept_rows():
        kept.setdefault(text, concept)
    return list(kept.items())


def main(out: Path = OUT) -> None:
    rows = bank_rows()
    lines = ["text\tconcept"] + [f"{text}\t{concept}" for text, concept in rows]
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    sys.stderr.write(f"{out}: {len(rows)} texts\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else OUT)
