"""Metrics users know: masked sequence loss/accuracy, BLEU/chrF, classification reports."""
