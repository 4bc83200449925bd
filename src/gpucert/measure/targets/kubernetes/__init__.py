"""The kubernetes target: the only room that imports the `kubernetes` client. Transport errors are translated
here (api.py), once; nothing above sees an ApiException."""
