"""Rebuild nbutils/studies/common/data/nouns.tsv: the 100 most frequent countable nouns among a candidate list.

The seeds took the countable nouns of the Oxford 3000 list and kept the 100 most frequent in
OLMo-2's training corpus. Neither the Oxford list nor that corpus is reachable offline, so this
script starts from CANDIDATES (hand-picked concrete, countable nouns that all appear in the Oxford
3000 and read naturally in "Alice has 7 of the 20 ___") and ranks them by the `wordfreq` package's
English Zipf frequency of the singular form (a blend of Wikipedia, subtitles, news, books, web and
social-media text). Run once, by hand: `pip install wordfreq && python scripts/build_nouns.py`.
"""
from __future__ import annotations

from pathlib import Path

CANDIDATES = """
apple:apples bag:bags ball:balls bank:banks bed:beds bike:bikes bird:birds boat:boats book:books
bottle:bottles box:boxes boy:boys brick:bricks bridge:bridges building:buildings bus:buses
button:buttons cake:cakes camera:cameras candle:candles cap:caps car:cars card:cards cat:cats
chair:chairs child:children city:cities coat:coats coin:coins computer:computers cookie:cookies
country:countries cow:cows cup:cups desk:desks dish:dishes document:documents dog:dogs door:doors
dress:dresses egg:eggs engine:engines farm:farms field:fields file:files film:films flag:flags
flower:flowers friend:friends fruit:fruits game:games garden:gardens gift:gifts girl:girls
glass:glasses glove:gloves goal:goals hat:hats horse:horses hotel:hotels house:houses idea:ideas
island:islands jacket:jackets job:jobs key:keys kid:kids knife:knives lake:lakes lamp:lamps
leaf:leaves letter:letters list:lists machine:machines map:maps meal:meals message:messages
movie:movies note:notes office:offices orange:oranges page:pages painting:paintings pen:pens
pencil:pencils phone:phones photo:photos picture:pictures pig:pigs plan:plans plant:plants
plate:plates player:players pocket:pockets point:points product:products project:projects
question:questions river:rivers road:roads rock:rocks room:rooms rule:rules school:schools
seat:seats sheep:sheep shirt:shirts shoe:shoes shop:shops sign:signs song:songs spoon:spoons
stamp:stamps star:stars station:stations stone:stones store:stores story:stories street:streets
student:students table:tables task:tasks teacher:teachers test:tests ticket:tickets tool:tools
tooth:teeth town:towns toy:toys train:trains tree:trees truck:trucks village:villages wall:walls
watch:watches website:websites window:windows word:words worker:workers
""".split()


def main() -> None:
    from wordfreq import zipf_frequency

    pairs = [c.split(":") for c in CANDIDATES]
    ranked = sorted(pairs, key=lambda p: (-zipf_frequency(p[0], "en"), p[0]))[:100]
    out = Path(__file__).resolve().parents[1] / "nbutils" / "studies" / "common" / "data" / "nouns.tsv"
    lines = ["singular\tplural\tzipf_en"]
    lines += [f"{s}\t{p}\t{zipf_frequency(s, 'en'):.2f}" for s, p in ranked]
    out.write_text("\n".join(lines) + "\n")
    print(f"wrote {len(ranked)} nouns of {len(pairs)} candidates to {out}")


if __name__ == "__main__":
    main()
