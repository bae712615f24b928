"""The papers' numbers reproduced (Shazeer 2019, GQA 2023, DeepSeek-V2) from the floors below."""
