"""More topics and phrasings for broad_sources.py's STEM and humanities questions (issue 39).

The first lists (broad_sources.py) held 55 STEM and 42 humanities topics under 10 phrasings each,
so those two sources ran out of distinct prompts at ~550 and ~420, and the self-instruct asks
drew their topics from the same few. These lists are the everyday-knowledge topics a chat user
asks about, plus shorter, plainer phrasings of the kind people type.

Licence: written for dspark (the repository's licence).

broad_sources.py leaves out the topics that a held-out prompt names (`usable_topics`).
"""

STEM_TOPICS_MORE = [
    # physics
    "static electricity", "the laws of thermodynamics", "entropy", "buoyancy", "air pressure",
    "centripetal force", "momentum", "kinetic and potential energy", "electromagnetic waves",
    "infrared light", "ultraviolet light", "X-rays", "lasers", "lenses and focal length",
    "mirrors and reflection", "refraction", "polarised sunglasses", "nuclear fission",
    "half-life", "dark matter", "dark energy", "the theory of relativity", "time dilation",
    "quantum entanglement", "the uncertainty principle", "atoms and their structure",
    "electrons and electric current", "voltage and resistance", "alternating current",
    "transformers in power grids", "electric motors", "generators", "inertia", "terminal velocity",
    "surface tension", "viscosity", "heat conduction", "convection", "thermal insulation",
    "pendulums", "resonance", "echoes", "ultrasound", "noise-cancelling headphones",
    # chemistry
    "chemical bonds", "oxidation and rust", "combustion", "catalysts", "polymers and plastics",
    "the pH scale", "salt dissolving in water", "crystals", "isotopes", "noble gases",
    "chemical reactions in cooking", "soap and detergents", "fermentation", "baking soda",
    "alloys", "carbon dating", "electrolysis", "fireworks colours", "batteries and redox",
    # biology and medicine
    "cells and organelles", "mitochondria", "mitosis and meiosis", "genes and heredity",
    "mutations", "proteins", "viruses", "bacteria in the gut", "the lymphatic system",
    "the lungs and breathing", "the liver", "the skeleton", "muscles and exercise", "hormones",
    "insulin and diabetes", "blood pressure", "cholesterol", "allergies", "fever",
    "the sense of smell", "taste buds", "hearing and the inner ear", "memory in the brain",
    "neurons", "reflexes", "the circadian rhythm", "dreams", "caffeine", "dehydration",
    "sunburn", "wound healing", "anaesthesia", "MRI scans", "blood donation", "organ transplants",
    "antibodies", "pandemics", "hand washing and germs", "nutrition and vitamins", "protein in food",
    "carbohydrates", "dietary fibre", "metabolism", "ageing", "the placebo effect",
    "clinical trials", "pain relief medicines", "eyesight and glasses", "colour blindness",
    # life and earth science
    "food chains", "ecosystems", "biodiversity", "pollination", "camouflage in animals",
    "hibernation", "how plants grow towards light", "seeds and germination", "fungi",
    "mushrooms", "lichens", "rainforests", "deserts", "wetlands", "glaciers", "ice ages",
    "fossils", "dinosaurs", "the extinction of the dinosaurs", "whales", "dolphin intelligence",
    "ant colonies", "spider silk", "butterfly metamorphosis", "frogs", "sharks", "elephants",
    "wolves and dogs", "cats' behaviour", "bird song", "salmon migration", "invasive species",
    "soil erosion", "rivers and deltas", "caves and stalactites", "mountains forming",
    "tsunamis", "tornadoes", "lightning", "thunder", "snowflakes", "fog", "droughts", "monsoons",
    "El Nino", "air pollution", "acid rain", "recycling plastics", "composting",
    "deforestation", "sea level rise", "renewable energy", "hydroelectric dams", "tidal power",
    "nuclear power plants", "hydrogen fuel", "carbon capture",
    # astronomy
    "the Sun", "solar eclipses", "lunar eclipses", "Mars", "Jupiter's moons", "Saturn's rings",
    "exoplanets", "neutron stars", "supernovas", "galaxies", "the Milky Way", "light-years",
    "telescopes", "the International Space Station", "rockets", "satellites", "asteroids",
    "meteor showers", "the northern lights", "how stars are born", "life on other planets",
    # technology and computing
    "computer memory", "hard drives and SSDs", "processors", "operating systems",
    "programming languages", "algorithms", "databases", "cloud computing", "Wi-Fi",
    "Bluetooth", "5G networks", "search engines", "email delivery", "passwords and hashing",
    "two-factor authentication", "computer viruses", "firewalls", "open-source software",
    "artificial intelligence", "large language models", "computer vision", "robotics",
    "self-driving cars", "drones", "virtual reality", "blockchains", "QR codes", "barcodes",
    "touchscreens", "digital cameras", "image compression", "video streaming", "data centres",
    "binary numbers", "spreadsheets", "version control", "web browsers", "cookies on websites",
    # engineering
    "skyscrapers", "earthquake-proof buildings", "tunnels", "canals and locks", "elevators",
    "air conditioning", "heat pumps", "water towers", "sewage systems", "roads and asphalt",
    "trains and railways", "aeroplane wings", "helicopters", "submarines", "ships floating",
    "car engines", "brakes", "tyres", "bicycles", "clocks and watches", "concrete", "steel",
    "glass", "paper making", "textiles", "3D scanners", "sensors in phones", "smart thermostats",
]

HUMANITIES_TOPICS_MORE = [
    # ancient and medieval history
    "ancient Egypt", "the pyramids of Giza", "Mesopotamia", "the Code of Hammurabi",
    "ancient Greek democracy", "Alexander the Great", "the Persian Empire", "the Roman Republic",
    "Julius Caesar", "the Roman army", "Roman roads", "the Han dynasty", "the Great Wall of China",
    "the Maya civilisation", "the Inca Empire", "the Phoenicians", "the Celts", "the Crusades",
    "feudalism", "medieval castles", "knights and chivalry", "the Black Death",
    "the Holy Roman Empire", "the Norman conquest of England", "the Tang dynasty",
    "the Islamic Golden Age", "the Abbasid Caliphate", "the Khmer Empire and Angkor Wat",
    "the Song dynasty", "the samurai", "the Hundred Years' War", "medieval monasteries",
    "the Swahili coast", "Great Zimbabwe", "the Ming dynasty's treasure fleets",
    # early modern and modern history
    "the age of exploration", "Christopher Columbus", "the Columbian exchange",
    "the Spanish Armada", "the Thirty Years' War", "the Dutch Golden Age", "the Mughal Empire",
    "the Qing dynasty", "the American Revolution", "the Declaration of Independence",
    "Napoleon", "the Congress of Vienna", "the revolutions of 1848", "the unification of Germany",
    "the unification of Italy", "the American Civil War", "the transatlantic slave trade",
    "colonialism in Africa", "the Scramble for Africa", "the Opium Wars", "the Boxer Rebellion",
    "the First World War", "trench warfare", "the Treaty of Versailles", "the Russian Revolution",
    "the League of Nations", "the Second World War", "the Holocaust", "D-Day",
    "the atomic bombings of Hiroshima and Nagasaki", "the founding of the United Nations",
    "the partition of India", "decolonisation", "the Chinese Revolution of 1949",
    "the Korean War", "the Vietnam War", "the civil rights movement", "the space race",
    "the fall of the Berlin Wall", "the end of apartheid", "the European Union",
    "globalisation", "the history of the internet", "the Arab Spring",
    # philosophy and religion
    "Socrates", "Plato's cave", "Aristotle's ethics", "Epicureanism", "Confucius' teachings",
    "Taoism", "Hinduism", "Judaism", "Christianity", "Islam", "Sikhism", "Zen Buddhism",
    "the golden rule", "virtue ethics", "moral relativism", "the trolley problem",
    "Descartes' 'I think, therefore I am'", "empiricism", "rationalism", "Kant's categorical imperative",
    "Nietzsche", "Simone de Beauvoir", "John Stuart Mill's idea of liberty", "pragmatism",
    "the philosophy of mind", "personal identity", "the meaning of life", "happiness",
    "justice", "human rights", "the ethics of artificial intelligence", "animal rights",
    "political philosophy", "democracy and its critics", "liberalism", "socialism",
    "conservatism", "anarchism", "nationalism",
    # literature and language
    "epic poetry", "Homer's Odyssey", "the Iliad", "the Epic of Gilgamesh", "Dante's Inferno",
    "Don Quixote", "Shakespeare's tragedies", "Hamlet", "Romeo and Juliet", "sonnets",
    "Romantic poetry", "Victorian novels", "Charles Dickens", "Jane Austen", "Leo Tolstoy",
    "Russian literature", "magical realism", "science fiction as a genre", "detective stories",
    "fables", "folk tales", "satire", "irony in literature", "metaphor and simile",
    "unreliable narrators", "the hero's journey", "tragedy and comedy", "children's literature",
    "the history of the English language", "Latin's influence on modern languages",
    "sign languages", "how children learn languages", "translation", "endangered languages",
    "writing systems of the world", "the alphabet", "Chinese characters", "grammar",
    "slang", "idioms", "rhetoric", "public speaking", "storytelling",
    # art, music, film
    "cave paintings", "ancient Greek sculpture", "Byzantine mosaics", "Leonardo da Vinci",
    "Michelangelo", "Baroque painting", "Rembrandt", "Romanticism in art", "Van Gogh",
    "cubism", "surrealism", "abstract expressionism", "pop art", "street art",
    "photography as art", "Japanese woodblock prints", "Islamic geometric art", "calligraphy",
    "architecture of cathedrals", "modern architecture", "Art Deco", "the Bauhaus",
    "classical music", "Mozart", "Beethoven", "opera", "the blues", "rock and roll",
    "hip hop", "folk music", "the orchestra", "musical scales", "film noir",
    "silent films", "animation", "documentaries", "theatre in ancient Greece",
    "ballet", "dance traditions", "fashion history",
    # economics, society, culture
    "inflation", "interest rates", "central banks", "taxes", "trade and tariffs",
    "the stock market", "recessions", "unemployment", "minimum wage", "monopolies",
    "the gig economy", "microfinance", "economic inequality", "gross domestic product",
    "budgeting for households", "cryptocurrencies as money", "barter", "capitalism",
    "urbanisation", "migration", "population growth", "the welfare state", "education systems",
    "the history of universities", "the role of the media", "propaganda", "advertising",
    "social media and society", "consumerism", "sport and society", "the history of football",
    "festivals around the world", "food traditions", "tea ceremonies", "the history of coffee",
    "spices and the spice trade", "weddings around the world", "family structures",
    "manners and etiquette", "tourism", "cities of the ancient world", "maps and borders",
    "the history of medicine", "the history of timekeeping", "the history of the calendar",
    "the history of the bicycle", "the history of printing in China", "archaeology",
    "anthropology", "sociology", "psychology as a science", "behavioural economics",
    "the law and courts", "trial by jury", "the separation of powers", "voting systems",
    "diplomacy", "international law", "the Geneva Conventions", "peace treaties",
    "mythology of ancient Greece", "Norse mythology", "Egyptian gods", "Hindu epics",
    "heroes in legends", "superstitions", "ghost stories", "utopias and dystopias",
]

STEM_PHRASES_MORE = [
    "What is {t}?", "Tell me about {t}.", "Can you explain {t} in simple terms?",
    "I never understood {t}. Can you help?", "Give me a quick overview of {t}.",
    "What is the science behind {t}?", "Why does {t} matter?",
    "Explain {t} step by step.", "What are the main facts about {t}?",
    "How would you explain {t} to someone who has never studied science?",
    "What are the pros and cons of {t}?", "Write a short paragraph about {t} for a school report.",
]
HUMANITIES_PHRASES_MORE = [
    "Tell me about {t}.", "What is {t}?", "Give me a short summary of {t}.",
    "Why is {t} important?", "What happened during {t}?", "Explain {t} in simple terms.",
    "What are three interesting facts about {t}?", "How is {t} remembered today?",
    "Write a paragraph about {t} for a student.", "What are the main points of {t}?",
    "What is a common misunderstanding about {t}?", "How would you teach {t} in ten minutes?",
]

