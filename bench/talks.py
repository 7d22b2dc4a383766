"""Generated talks for the transcript quality benchmark and tests: reference texts in English,
German, Spanish and French, spoken by espeak-ng (any of its voices, at any
rate) with or without pauses between sentences."""

from __future__ import annotations

import re
import subprocess
import tempfile
import wave
from pathlib import Path

import numpy as np

from fredica.cli import demo_media

ENGLISH = (
    "Rivers have shaped the land for millions of years, carving valleys through solid rock.",
    "Early farmers settled along their banks because the soil there was rich and easy to work.",
    "Over time people learned to build bridges across the water, first from wood and later "
    "from stone.",
    "The Romans were famous for their arches, and some of those bridges still carry traffic.",
    "Today there are dams on most large rivers, holding back water for cities and fields.",
    "A dam can produce electricity, but it also blocks the path of fish that swim upstream.",
    "Salmon, for example, return to the stream where they hatched in order to lay their eggs.",
    "Engineers now add ladders and channels so that the fish can pass around the wall.",
    "In the north, many rivers freeze in winter and the ice can be thick enough to drive on.",
    "When spring arrives the ice breaks into large plates that crash against the banks.",
    "Floods are part of the natural cycle, and they spread fresh mud across the plains.",
    "Cities that grew close to the water had to learn how to live with these floods.",
    "Some built high walls, others moved their houses onto hills or wooden posts.",
    "Shipping was the fastest way to move heavy goods before railways were invented.",
    "Barges carried grain, coal and timber from the interior down to the harbours.",
    "Canals connected one river to another, so that boats could cross whole countries.",
    "Locks raise and lower the boats in steps, using nothing but the weight of the water.",
    "Pollution became a serious problem when factories poured their waste into the current.",
    "Many rivers were so dirty that nothing could live in them for several decades.",
    "Strict laws and new treatment plants have made the water much cleaner again.",
    "Otters and beavers have returned to places where they had not been seen for a century.",
    "Scientists measure the health of a river by counting the insects that live on its bed.",
    "A clean stream is full of small larvae hiding under the stones.",
    "Climate change brings longer droughts, and some rivers now run dry in late summer.",
    "Farmers who depend on irrigation worry about how much water will be left for them.",
    "At the same time, heavy storms can raise the level of a river within a few hours.",
    "Planners therefore give rivers more room, turning old fields back into wetlands.",
    "Wetlands soak up the water like a sponge and release it slowly over many weeks.",
    "They are also home to birds, frogs and rare plants that need shallow water.",
    "Walking along a river at dawn, you may see a heron standing perfectly still.",
    "So the next time you cross a bridge, stop for a moment and look at the water below.",
    "It has travelled a long way, and it still has a long way to go before reaching the sea.",
    # the second half: another topic, so that a sample is long enough for a one-point WER
    # difference to be more than a handful of words
    "Bread is one of the oldest foods that people have learned to make.",
    "The first loaves were flat, baked on hot stones beside an open fire.",
    "Later someone noticed that dough left in the warmth began to rise.",
    "Tiny yeast cells feed on the sugar in the flour and release bubbles of gas.",
    "Those bubbles are trapped by the gluten, which makes the dough soft and elastic.",
    "A baker kneads the dough for several minutes to build that strength.",
    "Then it rests in a covered bowl until it has doubled in size.",
    "In many villages the baker started work long before sunrise.",
    "Families would smell the fresh bread on their way to the market.",
    "Some towns had a shared oven, and each family marked its loaf with a sign.",
    "Rye grows well in cold and wet regions, so northern bread is often dark and heavy.",
    "In the south, wheat gives a lighter loaf with a thin and crisp crust.",
    "Sourdough uses a starter of flour and water that is kept alive for years.",
    "Bakers feed their starter every day, almost as if it were a pet.",
    "The sour taste comes from bacteria that live together with the yeast.",
    "Factories now produce most of the bread that people buy in shops.",
    "Machines mix, shape and slice thousands of loaves every hour.",
    "Yet small bakeries have become popular again in many cities.",
    "Customers are willing to wait in a queue for a loaf that is still warm.",
    "Baking at home also became a favourite hobby during long winter evenings.",
    "All you need is flour, water, salt, yeast and a little patience.",
    "The temperature of the kitchen decides how quickly the dough will grow.",
    "A loaf is ready when it sounds hollow as you tap the bottom.",
    "It is best to let it cool before cutting, even though that is hard to do.",
    "Old bread need not be thrown away, because it can become soup or pudding.",
    "In some countries bread is offered to guests as a sign of welcome.",
    "Farmers, millers and bakers all depend on one another in this long chain.",
    "A dry summer or a wet harvest can change the price of flour across the world.",
    "So when you eat your next sandwich, remember the hands that made it possible.",
)

GERMAN = (
    "Der Wald ist für viele Menschen ein Ort der Ruhe und der Erholung.",
    "Im Frühling blühen unter den Bäumen die ersten Blumen, bevor die Blätter wachsen.",
    "Im Sommer spenden die hohen Buchen angenehmen Schatten an heißen Tagen.",
    "Der Herbst färbt das Laub gelb, rot und braun, und die Nächte werden kühler.",
    "Im Winter liegt oft Schnee, und man kann die Spuren der Tiere gut erkennen.",
    "Rehe, Füchse und Wildschweine leben versteckt zwischen den Bäumen.",
    "Förster kümmern sich darum, dass der Wald gesund bleibt und neue Bäume wachsen.",
    "Trockene Sommer machen den Fichten zu schaffen, weil ihre Wurzeln flach sind.",
    "Deshalb pflanzt man heute mehr Eichen und Buchen, die mit Hitze besser zurechtkommen.",
    "Ein gesunder Wald speichert viel Wasser und schützt den Boden vor dem Abtragen.",
    "Am Wochenende wandern viele Familien mit ihren Kindern auf den markierten Wegen.",
    "Wer leise ist, hört den Specht, der an einem alten Stamm klopft.",
    "Viele Städte liegen an einem großen Fluss, der früher der wichtigste Handelsweg war.",
    "Schiffe brachten Salz, Holz und Getreide von einem Hafen zum nächsten.",
    "Heute fahren auf dem Rhein noch immer lange Frachtschiffe mit Containern.",
    "An den Ufern wachsen Weinberge, die im Herbst von vielen Helfern geerntet werden.",
    "Die Trauben werden gepresst, und der Saft gärt einige Wochen in großen Fässern.",
    "Im Winter trifft man sich gern auf dem Weihnachtsmarkt unter bunten Lichtern.",
    "Dort gibt es gebrannte Mandeln, heißen Tee und frisch gebackene Lebkuchen.",
    "Das Brot hat in Deutschland eine lange Tradition, und es gibt hunderte Sorten.",
    "Viele Bäckereien öffnen schon um sechs Uhr morgens, damit die Brötchen frisch sind.",
    "Kinder fahren mit dem Fahrrad zur Schule, wenn das Wetter es erlaubt.",
    "In den Bergen liegt im Januar oft so viel Schnee, dass die Straßen gesperrt werden.",
    "Dann bringen kleine Bahnen die Skifahrer hinauf zu den Pisten.",
    "Im Sommer wandern die Kühe auf die hohen Weiden und kehren erst im Herbst zurück.",
    "Aus ihrer Milch macht man einen würzigen Käse, der lange reifen muss.",
    "Museen zeigen alte Werkzeuge und erzählen, wie die Menschen früher gelebt haben.",
    "Die Eisenbahn verbindet heute fast jede Stadt mit den großen Zentren des Landes.",
    "Wer mit dem Zug reist, kann lesen, arbeiten oder einfach aus dem Fenster schauen.",
    "Am Abend sitzen die Nachbarn vor ihren Häusern und erzählen von ihrem Tag.",
    "So endet ein langer Tag, und morgen beginnt alles wieder von vorn.",
)

SPANISH = (
    "El mar Mediterráneo ha unido a muchos pueblos durante miles de años.",
    "Los comerciantes antiguos cruzaban sus aguas en barcos de madera con grandes velas.",
    "Llevaban aceite, vino y cerámica de un puerto a otro a lo largo de la costa.",
    "Hoy en día las playas reciben a millones de turistas cada verano.",
    "Muchos pescadores todavía salen al amanecer para lanzar sus redes.",
    "El agua es más salada que la del océano porque se evapora con el calor del sol.",
    "En las profundidades viven pulpos, delfines y praderas de plantas marinas.",
    "Estas praderas producen oxígeno y protegen la arena de las olas fuertes.",
    "La contaminación de los plásticos es uno de los problemas más graves de la región.",
    "Varios países trabajan juntos para limpiar las costas y proteger a los animales.",
    "Por la tarde, las familias pasean junto al puerto y comen pescado fresco.",
    "Cuando el sol se pone, el cielo se vuelve naranja sobre el horizonte.",
    "En los pueblos del interior, la vida sigue un ritmo más tranquilo.",
    "Los mercados abren temprano y venden frutas, verduras y pan recién hecho.",
    "Las abuelas conocen recetas que han pasado de una generación a otra.",
    "En invierno se prepara un guiso de lentejas que calienta toda la casa.",
    "Los niños juegan en la plaza mientras sus padres toman un café.",
    "Cada pueblo celebra su fiesta con música, bailes y fuegos artificiales.",
    "Durante esos días llegan visitantes de todas partes del país.",
    "Los olivos cubren las colinas y dan un aceite de color verde dorado.",
    "La cosecha de las aceitunas empieza a finales del otoño y dura varias semanas.",
    "Muchos jóvenes se mudan a la ciudad para estudiar o buscar trabajo.",
    "Algunos vuelven más tarde para abrir pequeños negocios en su tierra.",
    "El tren de alta velocidad une ahora las grandes ciudades en pocas horas.",
    "Antes el mismo viaje duraba un día entero por carreteras estrechas.",
    "Las bibliotecas públicas organizan lecturas y talleres para todas las edades.",
    "En verano, las noches son largas y la gente cena muy tarde.",
    "Los museos guardan pinturas famosas que atraen a millones de personas.",
    "Un buen paseo por el casco antiguo revela calles estrechas y patios llenos de flores.",
    "Al final del día, las campanas de la iglesia marcan la hora de volver a casa.",
)

FRENCH = (
    "La Loire est le plus long fleuve de France et traverse de nombreuses régions.",
    "Au bord de l'eau, on trouve des châteaux construits pour les rois et leurs familles.",
    "Les visiteurs viennent du monde entier pour admirer leurs jardins et leurs tours.",
    "Au printemps, les vignes se couvrent de petites feuilles vertes.",
    "Les vignerons surveillent le temps chaque matin, car le gel peut tout détruire.",
    "En automne, la récolte du raisin réunit les voisins et les amis.",
    "Le soir, on partage un repas simple avec du pain, du fromage et des fruits.",
    "Dans les villages, le marché a lieu une fois par semaine sur la place.",
    "Les paysans y vendent des légumes, des œufs et du miel de leurs ruches.",
    "La boulangerie ouvre très tôt pour que chacun ait son pain frais.",
    "Les enfants vont à l'école à pied et rentrent déjeuner à la maison.",
    "Le mercredi après-midi, beaucoup d'entre eux font du sport ou de la musique.",
    "Les bibliothèques prêtent des livres, des films et des jeux à toute la famille.",
    "En été, les routes sont pleines de voitures qui partent vers la mer.",
    "Sur la côte atlantique, les vagues attirent les surfeurs et les promeneurs.",
    "Les marées changent le paysage deux fois par jour.",
    "À marée basse, on peut marcher loin sur le sable et ramasser des coquillages.",
    "Les phares guident encore les bateaux pendant les nuits de tempête.",
    "Dans les montagnes, la neige reste parfois jusqu'au mois de juin.",
    "Les bergers montent avec leurs troupeaux vers les prairies d'altitude.",
    "Le fromage fabriqué là-haut a un goût très particulier.",
    "Les trains à grande vitesse relient Paris aux grandes villes en quelques heures.",
    "Autrefois, le même voyage prenait une journée entière.",
    "Les musées de la capitale gardent des tableaux célèbres et des sculptures anciennes.",
    "Le dimanche, les parcs se remplissent de familles et de joueurs de pétanque.",
    "Les cafés installent leurs tables sur le trottoir dès les premiers beaux jours.",
    "On y lit le journal, on discute et on regarde passer les gens.",
    "Chaque région a ses fêtes, ses danses et ses chansons traditionnelles.",
    "Les jeunes partent souvent étudier en ville, puis certains reviennent au pays.",
    "À la fin de la journée, les cloches de l'église sonnent l'heure du dîner.",
)

TALKS: dict[str, tuple[str, tuple[str, ...]]] = {
    "en": ("en-us", ENGLISH),
    "de": ("de", GERMAN),
    "es": ("es", SPANISH),
    "fr": ("fr", FRENCH),
}
_WORD = re.compile(r"\w+(?:'\w+)?", re.UNICODE)


def words(text: str) -> list[str]:
    """Lower-cased words (any script), punctuation dropped."""
    return [w.lower() for w in _WORD.findall(text)]


def word_error_rate(reference: str, hypothesis: str) -> float:
    """Levenshtein distance over words / number of reference words."""
    ref, hyp = words(reference), words(hypothesis)
    prev = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        cur = [i] + [0] * len(hyp)
        for j, h in enumerate(hyp, 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (r != h))
        prev = cur
    return prev[-1] / max(1, len(ref))


def _trimmed(path: Path) -> tuple[bytes, int]:
    """A sentence's samples without espeak's leading and trailing silence, and its rate."""
    with wave.open(str(path), "rb") as wav:
        rate = wav.getframerate()
        samples = np.frombuffer(wav.readframes(wav.getnframes()), dtype=np.int16)
    loud = np.flatnonzero(np.abs(samples.astype(np.int32)) > 300)
    if loud.size == 0:
        return b"", rate
    return samples[loud[0] : loud[-1] + 1].tobytes(), rate


def speak(
    sentences: tuple[str, ...],
    out: Path,
    voice: str | tuple[str, ...],
    pause_sec: float,
    wpm: int = 150,
) -> Path:
    """espeak-ng speech at `wpm` words a minute with exactly `pause_sec` of silence between
    sentences (espeak's own trailing silence removed, so 0 means the sentences run on without
    any pause); several voices take turns sentence by sentence (a conversation)."""
    voices = (voice,) if isinstance(voice, str) else voice
    exe = demo_media.espeak_binary()
    if exe is None:
        raise demo_media.MediaSetupError(f"espeak-ng is not installed: {demo_media.SETUP_HINT}")
    frames: list[bytes] = []
    rate = 22050
    with tempfile.TemporaryDirectory() as tmp:
        for i, sentence in enumerate(sentences):
            part = Path(tmp) / f"s{i}.wav"
            subprocess.run(
                [exe, "-v", voices[i % len(voices)], "-s", str(wpm), "-w", str(part), sentence],
                check=True,
                capture_output=True,
            )
            data, rate = _trimmed(part)
            frames += [data, b"\0\0" * int(rate * pause_sec)]
    out.parent.mkdir(parents=True, exist_ok=True)
    with wave.open(str(out), "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(rate)
        wav.writeframes(b"".join(frames))
    return out


def make_talk(
    out: Path,
    language: str,
    *,
    pauses: bool = True,
    repeat: int = 1,
    limit: int | None = None,
    voices: tuple[str, ...] = (),
    wpm: int = 150,
) -> tuple[Path, str]:
    """(WAV of the talk, its reference text). Without pauses the sentences run on, so no
    silence is found and every cut must be an overlap cut. `voices` (espeak-ng voice names,
    taking turns) replace the language's one voice."""
    voice, sentences = TALKS[language]
    chosen = (sentences[:limit] if limit else sentences) * repeat
    wav = speak(chosen, out, voices or voice, 0.8 if pauses else 0.0, wpm)
    return wav, " ".join(chosen)
