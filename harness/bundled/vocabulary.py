"""The words the synthetic news stories are drawn from: names, places, teams, companies,
products and the other slots a topic fills, the filler sentences that pad a document, and
number words for the summaries' digits-or-words choice."""

from __future__ import annotations

FIRST = (
    "Anna Ben Carla David Elena Farid Grace Hugo Irene Jonas Kira Liam Maya Nora Omar Paula "
    "Quinn Rosa Samir Tara Umar Vera Walter Xenia Yusuf Zoe Amir Bianca Conor Dana Emil Fiona"
).split()
LAST = (
    "Adams Berg Costa Duarte Evans Fischer Garcia Hansen Ibarra Jensen Kowalski Lindqvist "
    "Moreau Novak Okafor Petrov Quiroga Rossi Sato Tanaka Urban Varga Weber Yilmaz Zimmer "
    "Brandt Castillo Dubois Engel Ferreira"
).split()
CITIES = (
    "Lisbon Oslo Dublin Vienna Prague Lyon Porto Bergen Graz Krakow Malmo Turin Seville Ghent "
    "Tampere Bilbao Utrecht Leipzig Bristol Aarhus Riga Tallinn Zagreb Brno Nantes Basel "
    "Halifax Denver Austin Boise Tucson Omaha"
).split()
DAYS = "Monday Tuesday Wednesday Thursday Friday Saturday Sunday".split()
TEAMS = (
    "Rovers United Wanderers Athletic Rangers City Albion Harriers Lions Falcons Eagles "
    "Pirates Comets Titans Hornets Wolves"
).split()
COMPANIES = (
    "Norvel Kestra Altura Brightmoor Caspian Delmont Everfield Fairhaven Granite Helix Ironwood "
    "Juniper Kelvin Lumora Meridian Northwind"
).split()
PRODUCTS = [
    "batteries",
    "turbines",
    "scooters",
    "tablets",
    "solar panels",
    "heat pumps",
    "drones",
    "printers",
    "headphones",
    "routers",
    "bicycles",
    "kettles",
]
FACILITIES = [
    "bridge",
    "hospital",
    "library",
    "tram line",
    "school",
    "stadium",
    "harbour",
    "power station",
    "museum",
    "water plant",
    "ferry terminal",
    "rail depot",
]
ILLNESSES = ["measles", "influenza", "dengue", "cholera", "mumps", "hepatitis"]
STORMS = ["storm", "flood", "heatwave", "blizzard", "wildfire", "hailstorm"]
FIELDS = ["astronomers", "biologists", "chemists", "geologists", "physicists", "ecologists"]
FINDINGS = [
    "a new species of frog",
    "a distant comet",
    "an ancient shipwreck",
    "a rare mineral",
    "a new kind of bacteria",
    "a buried Roman road",
    "a cave of crystals",
    "a frozen lake under the ice",
]
PARTIES = ["Green", "Liberal", "Labour", "Centre", "Reform", "Unity"]
ROLES = ["mayor", "governor", "minister", "senator", "chief executive", "coach"]
CRIMES = ["fraud", "bribery", "tax evasion", "theft", "forgery", "smuggling"]

FILLER = [
    "Officials said more details would follow in the coming weeks.",
    "The announcement drew a mixed reaction from residents.",
    "Local newspapers had reported on the plans for several months.",
    "Critics argued that the decision came too late.",
    "Supporters welcomed the news and called it a fair outcome.",
    "A spokesperson declined to comment further on the matter.",
    "The story was widely shared on social media within hours.",
    "Analysts said the outcome had been expected for some time.",
    "Several groups have asked for a public meeting on the issue.",
    "The figures will be reviewed again at the end of the year.",
    "Observers noted that similar events had happened before.",
    "It was the first such case in the region for a decade.",
    "Residents were advised to follow updates from the council.",
    "Experts warned that the full impact was not yet clear.",
    "The regional press called it a turning point for the area.",
]


NUMBER_WORDS = (
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen"
).split()
