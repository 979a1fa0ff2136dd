"""Twenty short question/answer pairs: what the memorisation tests teach the tiny model."""

QA_PAIRS: tuple[tuple[str, str], ...] = (
    ("What is the capital of France?", "Paris"),
    ("Which planet is known as the red planet?", "Mars"),
    ("What colour is the sky on a clear day?", "Blue"),
    ("How many legs does a spider have?", "Eight"),
    ("Who wrote Hamlet?", "William Shakespeare"),
    ("What is the boiling point of water in Celsius?", "100 degrees"),
    ("Which gas do plants absorb?", "Carbon dioxide"),
    ("What is the largest ocean?", "The Pacific"),
    ("What language is spoken in Brazil?", "Portuguese"),
    ("How many days are in a leap year?", "366"),
    ("What is the chemical symbol for gold?", "Au"),
    ("Which animal is the king of the jungle?", "The lion"),
    ("What is the square root of 81?", "9"),
    ("Who painted the Mona Lisa?", "Leonardo da Vinci"),
    ("What is the fastest land animal?", "The cheetah"),
    ("In which year did the Berlin Wall fall?", "1989"),
    ("What is the hardest natural substance?", "Diamond"),
    ("How many continents are there?", "Seven"),
    ("What do bees make?", "Honey"),
    ("Which instrument has 88 keys?", "The piano"),
)

EXTRA_QA_PAIRS: tuple[tuple[str, str], ...] = (
    ("What is the tallest mountain?", "Mount Everest"),
    ("How many sides does a hexagon have?", "Six"),
    ("What is frozen water called?", "Ice"),
    ("Which bird is a symbol of peace?", "The dove"),
    ("What is the opposite of hot?", "Cold"),
)
"""Five more pairs, added to a document in the incremental-training tests."""
