"""What a run asks: the dataset and the prompts built from it."""
