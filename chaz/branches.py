"""(being built: issue 9)"""
